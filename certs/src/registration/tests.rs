use http::{Method, Request, Response, StatusCode};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::Handle;

use super::{
    CREATED_BY_RUN_ANNOTATION, Form, REPLACED_ANNOTATION, Registered, Registrar, Registration, Replaced,
    WEBHOOK_CONFIGURATION, on_stop, set_client_config, webhook_configuration,
};

const CONFIG_PATH: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/watcher-operator";
const URL: &str = "https://127.0.0.1:8443/mutate";

fn bundle() -> ByteString {
    ByteString(b"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n".to_vec())
}

fn by_service() -> Registration {
    Registration::Service { name: "watcher-operator".into(), namespace: "watcher-system".into() }
}

/// The configuration `kubectl apply -k deploy/` creates, as the API server returns it.
fn installed_from_deploy() -> MutatingWebhookConfiguration {
    let mut config: MutatingWebhookConfiguration =
        serde_saphyr::from_str(include_str!("../../../deploy/webhook.yaml")).expect("deploy/webhook.yaml");
    config.metadata.resource_version = Some("41".into());
    config
}

#[test]
fn client_configs_hold_exactly_one_of_service_and_url() {
    let encoded = serde_json::to_value(bundle()).expect("base64");
    assert_eq!(
        serde_json::to_value(by_service().client_config(&bundle())).expect("serialises"),
        json!({"caBundle": encoded, "service": {"name": "watcher-operator", "namespace": "watcher-system",
                                               "path": "/mutate", "port": 443}})
    );
    assert_eq!(
        serde_json::to_value(Registration::Url(URL.into()).client_config(&bundle())).expect("serialises"),
        json!({"caBundle": encoded, "url": URL})
    );
}

#[test]
fn deploy_and_the_service_registration_agree() {
    // The operator in the cluster finds deploy/'s configuration already pointing at it: its
    // only write is the CA bundle.
    let mut config = installed_from_deploy();
    let mut expected = config.clone();
    for webhook in expected.webhooks.iter_mut().flatten() {
        webhook.client_config.ca_bundle = Some(bundle());
    }
    assert!(set_client_config(&mut config, &by_service().client_config(&bundle())));
    assert_eq!(config, expected);
    assert!(!set_client_config(&mut config, &by_service().client_config(&bundle())), "unchanged the second time");
}

#[test]
fn a_created_configuration_has_deploys_rules() {
    let created = webhook_configuration(Registration::Url(URL.into()).client_config(&bundle()), "watcher-system");
    let mut deployed = installed_from_deploy();
    set_client_config(&mut deployed, &Registration::Url(URL.into()).client_config(&bundle()));
    let (created, deployed) = (&created.webhooks.expect("webhooks")[0], &deployed.webhooks.expect("webhooks")[0]);
    assert_eq!(created.rules, deployed.rules);
    assert_eq!(created.namespace_selector, deployed.namespace_selector);
    assert_eq!(
        (&created.failure_policy, &created.reinvocation_policy, &created.side_effects, created.timeout_seconds),
        (&deployed.failure_policy, &deployed.reinvocation_policy, &deployed.side_effects, deployed.timeout_seconds)
    );
}

type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// Runs one registration against `scenario`, which answers every request.
async fn register<F>(registration: Registration, scenario: impl FnOnce(ApiHandle) -> F) -> Registered
where
    F: Future<Output = ()> + Send + 'static,
{
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(scenario(handle));
    let client = kube::Client::new(service, "default");
    let registered =
        Registrar::new(registration, "watcher-system").register(&client, &bundle()).await.expect("registers");
    drop(client);
    server.await.expect("scenario passed");
    registered
}

async fn expect(
    handle: &mut ApiHandle,
    method: Method,
    path: &str,
) -> (Value, tower_test::mock::SendResponse<Response<Body>>) {
    let (request, send) = handle.next_request().await.unwrap_or_else(|| panic!("{method} {path}"));
    assert_eq!((request.method(), request.uri().path()), (&method, path));
    let bytes = request.into_body().collect_bytes().await.expect("body");
    let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).expect("JSON") };
    (body, send)
}

fn respond(send: tower_test::mock::SendResponse<Response<Body>>, status: StatusCode, body: &impl serde::Serialize) {
    let bytes = serde_json::to_vec(body).expect("serialises");
    send.send_response(Response::builder().status(status).body(Body::from(bytes)).expect("response"));
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code})
}

/// Installed from deploy/ (by Service), then run outside the cluster with `--webhook-url`: the
/// one write replaces `clientConfig` whole, so `service` goes and `url` comes, and carries the
/// resourceVersion it read. Nothing else of the configuration changes.
#[tokio::test]
async fn switching_to_a_url_replaces_the_service() {
    let registered = register(Registration::Url(URL.into()), |mut api| async move {
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &installed_from_deploy());
        let (body, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        let encoded = serde_json::to_value(bundle()).expect("base64");
        assert_eq!(body["webhooks"][0]["clientConfig"], json!({"url": URL, "caBundle": encoded}));
        assert_eq!(body["metadata"]["resourceVersion"], "41", "optimistic concurrency");
        let mut expected = serde_json::to_value(installed_from_deploy()).expect("serialises");
        expected["webhooks"][0]["clientConfig"] = json!({"url": URL, "caBundle": encoded});
        // What a stop restores, recorded on the object for a run that is killed before it.
        let replaced = serde_json::to_string(&installed_from_deploy().webhooks.expect("webhooks")[0].client_config)
            .expect("serialises");
        expected["metadata"]["annotations"] = json!({REPLACED_ANNOTATION: replaced});
        assert_eq!(body, expected, "only clientConfig changes, and the record of what it replaced");
        respond(send, StatusCode::OK, &body);
        assert!(api.next_request().await.is_none(), "nothing more");
    })
    .await;
    assert_eq!(registered, Registered::Written);
}

/// And back: the operator in the cluster (by Service) finds the URL a developer registered and
/// puts the Service back, without the URL.
#[tokio::test]
async fn switching_back_to_the_service_replaces_the_url() {
    let registered = register(by_service(), |mut api| async move {
        let mut by_url = installed_from_deploy();
        set_client_config(&mut by_url, &Registration::Url(URL.into()).client_config(&ByteString(b"old".to_vec())));
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &by_url);
        let (body, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        let encoded = serde_json::to_value(bundle()).expect("base64");
        assert_eq!(
            body["webhooks"][0]["clientConfig"],
            json!({"caBundle": encoded, "service": {"name": "watcher-operator", "namespace": "watcher-system",
                                                    "path": "/mutate", "port": 443}})
        );
        assert_eq!(body["metadata"]["resourceVersion"], "41");
        respond(send, StatusCode::OK, &body);
        assert!(api.next_request().await.is_none(), "nothing more");
    })
    .await;
    assert_eq!(registered, Registered::Written);
}

#[tokio::test]
async fn a_current_registration_writes_nothing() {
    let registered = register(Registration::Url(URL.into()), |mut api| async move {
        let mut current = installed_from_deploy();
        set_client_config(&mut current, &Registration::Url(URL.into()).client_config(&bundle()));
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &current);
        assert!(api.next_request().await.is_none(), "no write");
    })
    .await;
    assert_eq!(registered, Registered::Unchanged);
}

#[tokio::test]
async fn a_url_registration_creates_a_missing_configuration() {
    let registered = register(Registration::Url(URL.into()), |mut api| async move {
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::NOT_FOUND, &status(404, "NotFound"));
        let (body, send) =
            expect(&mut api, Method::POST, "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations").await;
        assert_eq!(body["metadata"]["name"], WEBHOOK_CONFIGURATION);
        assert_eq!(body["metadata"]["annotations"], json!({CREATED_BY_RUN_ANNOTATION: URL}), "marked as a run's");
        assert_eq!(body["webhooks"][0]["clientConfig"]["url"], URL);
        assert!(body["webhooks"][0]["clientConfig"].get("service").is_none());
        assert_eq!(body["webhooks"][0]["failurePolicy"], "Ignore");
        respond(send, StatusCode::CREATED, &body);
        assert!(api.next_request().await.is_none(), "nothing more");
    })
    .await;
    assert_eq!(registered, Registered::Written);
}

#[tokio::test]
async fn a_service_registration_never_creates_the_configuration() {
    let registered = register(by_service(), |mut api| async move {
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::NOT_FOUND, &status(404, "NotFound"));
        assert!(api.next_request().await.is_none(), "no write");
    })
    .await;
    assert_eq!(registered, Registered::Missing);
}

#[tokio::test]
async fn a_concurrent_edit_is_a_conflict_to_retry() {
    let registered = register(Registration::Url(URL.into()), |mut api| async move {
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &installed_from_deploy());
        let (_, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        respond(send, StatusCode::CONFLICT, &status(409, "Conflict"));
    })
    .await;
    assert_eq!(registered, Registered::Conflict);
}

fn mock() -> (kube::Client, ApiHandle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(service, "default"), handle)
}

/// A first pass by URL that finds no configuration and creates one.
async fn created_by_url(api: &mut ApiHandle) {
    let (_, send) = expect(api, Method::GET, CONFIG_PATH).await;
    respond(send, StatusCode::NOT_FOUND, &status(404, "NotFound"));
    let (body, send) =
        expect(api, Method::POST, "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations").await;
    respond(send, StatusCode::CREATED, &body);
}

/// The stop of a run by URL that is to delete the configuration: it finds `found` and deletes
/// it, only as it found it (resourceVersion precondition).
async fn deleted_at_the_stop(api: &mut ApiHandle, found: &MutatingWebhookConfiguration) {
    let (_, send) = expect(api, Method::GET, CONFIG_PATH).await;
    respond(send, StatusCode::OK, found);
    let (body, send) = expect(api, Method::DELETE, CONFIG_PATH).await;
    assert_eq!(body["preconditions"], json!({"resourceVersion": found.metadata.resource_version}));
    respond(send, StatusCode::OK, &status(200, ""));
}

fn registered_as(
    registration: &Registration,
    ca_bundle: &ByteString,
    resource_version: &str,
) -> MutatingWebhookConfiguration {
    let mut config = installed_from_deploy();
    set_client_config(&mut config, &registration.client_config(ca_bundle));
    config.metadata.resource_version = Some(resource_version.into());
    config
}

/// The installed operator (by Service) took the registration; a developer's run by URL takes
/// it over. The installed one then stands back: one warning, no write, pass after pass, until
/// the Service form is back; then it keeps the CA bundle again.
#[tokio::test]
async fn a_foreign_form_stands_without_flapping() {
    let (client, mut api) = mock();
    let registrar = Registrar::new(by_service(), "watcher-system");
    let server = tokio::spawn(async move {
        // Pass 1: deploy/'s configuration, without a bundle yet: taken, the bundle written.
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &installed_from_deploy());
        let (body, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &body);
        // Passes 2 and 3: the URL of another operator, with its own bundle: no write.
        let by_url = registered_as(&Registration::Url(URL.into()), &ByteString(b"theirs".to_vec()), "50");
        for _ in 0..2 {
            let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
            respond(send, StatusCode::OK, &by_url);
        }
        // Pass 4: the other operator restored the Service form (with an older bundle): the
        // bundle is kept current again.
        let restored = registered_as(&by_service(), &ByteString(b"old".to_vec()), "51");
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &restored);
        let (body, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        assert_eq!(body["metadata"]["resourceVersion"], "51");
        assert!(body["webhooks"][0]["clientConfig"]["url"].is_null());
        respond(send, StatusCode::OK, &body);
        assert!(api.next_request().await.is_none(), "nothing more");
    });
    let passes = [Registered::Written, Registered::Yielded, Registered::Yielded, Registered::Written];
    for expected in passes {
        assert_eq!(registrar.register(&client, &bundle()).await.expect("registers"), expected);
    }
    drop(client);
    server.await.expect("scenario passed");
}

/// A run by URL that found the Service form puts it back on a graceful stop, bundle and all,
/// with the resourceVersion it read.
#[tokio::test]
async fn a_run_by_url_restores_the_service_form_it_replaced() {
    let (client, mut api) = mock();
    let registrar = Registrar::new(Registration::Url(URL.into()), "watcher-system");
    let installed = registered_as(&by_service(), &ByteString(b"installed".to_vec()), "41");
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &installed);
        let (body, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &body);
        // The stop.
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &registered_as(&Registration::Url(URL.into()), &bundle(), "42"));
        let (body, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        let mut expected = serde_json::to_value(&installed).expect("serialises");
        expected["metadata"]["resourceVersion"] = json!("42");
        assert_eq!(body, expected, "exactly what was replaced");
        respond(send, StatusCode::OK, &body);
        assert!(api.next_request().await.is_none(), "nothing more");
    });
    assert_eq!(registrar.register(&client, &bundle()).await.expect("registers"), Registered::Written);
    registrar.restore(&client).await.expect("restored");
    drop(client);
    server.await.expect("scenario passed");
}

/// A run by URL that created the configuration deletes it on a graceful stop, only as it
/// left it (resourceVersion precondition).
#[tokio::test]
async fn a_run_by_url_deletes_the_configuration_it_created() {
    let (client, mut api) = mock();
    let registrar = Registrar::new(Registration::Url(URL.into()), "watcher-system");
    let server = tokio::spawn(async move {
        created_by_url(&mut api).await;
        deleted_at_the_stop(&mut api, &registered_as(&Registration::Url(URL.into()), &bundle(), "60")).await;
        assert!(api.next_request().await.is_none(), "nothing more");
    });
    assert_eq!(registrar.register(&client, &bundle()).await.expect("registers"), Registered::Written);
    registrar.restore(&client).await.expect("deleted");
    drop(client);
    server.await.expect("scenario passed");
}

/// `kubectl apply -k deploy/` while the run by URL is still up: the Service form stands; the
/// run by URL neither writes it back nor, on its stop, touches it.
#[tokio::test]
async fn a_run_by_url_leaves_a_registration_taken_over_since() {
    let (client, mut api) = mock();
    let registrar = Registrar::new(Registration::Url(URL.into()), "watcher-system");
    let server = tokio::spawn(async move {
        created_by_url(&mut api).await;
        let reapplied = registered_as(&by_service(), &ByteString(b"installed".to_vec()), "70");
        for _ in 0..2 {
            let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
            respond(send, StatusCode::OK, &reapplied);
        }
        assert!(api.next_request().await.is_none(), "no write");
    });
    assert_eq!(registrar.register(&client, &bundle()).await.expect("registers"), Registered::Written);
    assert_eq!(registrar.register(&client, &bundle()).await.expect("registers"), Registered::Yielded);
    registrar.restore(&client).await.expect("left alone");
    drop(client);
    server.await.expect("scenario passed");
}

/// A run by Service never restores anything: the installed replicas come and go.
#[tokio::test]
async fn a_run_by_service_restores_nothing() {
    let (client, mut api) = mock();
    let registrar = Registrar::new(by_service(), "watcher-system");
    let server = tokio::spawn(async move {
        let by_url = registered_as(&Registration::Url(URL.into()), &bundle(), "80");
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &by_url);
        let (body, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &body);
        assert!(api.next_request().await.is_none(), "nothing more");
    });
    assert_eq!(registrar.register(&client, &bundle()).await.expect("registers"), Registered::Written);
    registrar.restore(&client).await.expect("nothing to do");
    drop(client);
    server.await.expect("scenario passed");
}

/// A configuration as a run by URL left it when it was killed: created by it (marked so), or
/// taken over from the Service form (the replaced `clientConfig` recorded).
fn left_by_a_killed_run(created: bool, resource_version: &str) -> MutatingWebhookConfiguration {
    let installed = registered_as(&by_service(), &ByteString(b"installed".to_vec()), "1");
    let mut config = if created {
        webhook_configuration(Registration::Url(URL.into()).client_config(&bundle()), "watcher-system")
    } else {
        registered_as(&Registration::Url(URL.into()), &bundle(), "1")
    };
    let (key, value) = if created {
        (CREATED_BY_RUN_ANNOTATION, URL.to_owned())
    } else {
        let previous = &installed.webhooks.expect("webhooks")[0].client_config;
        (REPLACED_ANNOTATION, serde_json::to_string(previous).expect("serialises"))
    };
    config.metadata.annotations = Some([(key.to_owned(), value)].into());
    config.metadata.resource_version = Some(resource_version.into());
    config
}

/// A run by URL was killed after it created the configuration; the next run by URL (same URL,
/// same CA: nothing to write) deletes it on its graceful stop, so `helm install` can follow.
#[tokio::test]
async fn a_later_run_deletes_what_a_killed_run_created() {
    let (client, mut api) = mock();
    let registrar = Registrar::new(Registration::Url(URL.into()), "watcher-system");
    let server = tokio::spawn(async move {
        let leftover = left_by_a_killed_run(true, "90");
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &leftover);
        deleted_at_the_stop(&mut api, &leftover).await;
        assert!(api.next_request().await.is_none(), "nothing more");
    });
    assert_eq!(registrar.register(&client, &bundle()).await.expect("registers"), Registered::Unchanged);
    registrar.restore(&client).await.expect("deleted");
    drop(client);
    server.await.expect("scenario passed");
}

/// A run by URL was killed after it took the Service form over; the next run by URL restores
/// the Service form the first one replaced (not the first one's URL), and clears the record.
#[tokio::test]
async fn a_later_run_restores_what_a_killed_run_replaced() {
    let (client, mut api) = mock();
    let registrar = Registrar::new(Registration::Url("https://10.0.0.1:9443/mutate".into()), "watcher-system");
    let installed = registered_as(&by_service(), &ByteString(b"installed".to_vec()), "1");
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &left_by_a_killed_run(false, "91"));
        let (body, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        assert_eq!(body["webhooks"][0]["clientConfig"]["url"], "https://10.0.0.1:9443/mutate");
        let recorded: serde_json::Value =
            serde_json::from_str(body["metadata"]["annotations"][REPLACED_ANNOTATION].as_str().expect("recorded"))
                .expect("JSON");
        assert_eq!(recorded["service"]["name"], "watcher-operator", "the record is kept");
        respond(send, StatusCode::OK, &body);
        // The stop.
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &body);
        let (body, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        assert_eq!(body["webhooks"], serde_json::to_value(&installed).expect("serialises")["webhooks"]);
        assert!(body["metadata"].get("annotations").is_none(), "the record is cleared: {body}");
        respond(send, StatusCode::OK, &body);
        assert!(api.next_request().await.is_none(), "nothing more");
    });
    assert_eq!(registrar.register(&client, &bundle()).await.expect("registers"), Registered::Written);
    registrar.restore(&client).await.expect("restored");
    drop(client);
    server.await.expect("scenario passed");
}

/// The installed operator (by Service) that finds a killed run's configuration takes it over
/// and clears the record: a later run by URL must not delete an installation.
#[tokio::test]
async fn the_installed_operator_clears_a_killed_runs_record() {
    let registered = register(by_service(), |mut api| async move {
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &left_by_a_killed_run(true, "92"));
        let (body, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        assert!(body["metadata"].get("annotations").is_none(), "the record is cleared: {body}");
        assert_eq!(body["webhooks"][0]["clientConfig"]["service"]["name"], "watcher-operator");
        respond(send, StatusCode::OK, &body);
        assert!(api.next_request().await.is_none(), "nothing more");
    })
    .await;
    assert_eq!(registered, Registered::Written);
}

/// What the log says of a registration: where kube-apiserver calls, and what a stop will do;
/// never the bytes of a CA bundle.
#[test]
fn registrations_read_as_a_person_would_write_them() {
    let service = by_service();
    let url = Registration::Url(URL.into());
    assert_eq!(service.to_string(), "Service watcher-system/watcher-operator:443/mutate");
    assert_eq!(url.to_string(), "URL https://127.0.0.1:8443/mutate");
    let previous = Replaced::ClientConfig(service.client_config(&bundle()));
    assert_eq!(
        on_stop(&url, Some(&previous)),
        "; a graceful stop will restore the registration by Service watcher-system/watcher-operator:443/mutate"
    );
    assert_eq!(
        on_stop(&url, Some(&Replaced::Nothing)),
        "; a graceful stop will delete the configuration (created by a run by URL)"
    );
    assert_eq!(on_stop(&url, None), "; a graceful stop leaves it as it is");
    assert_eq!(
        on_stop(&service, Some(&Replaced::ClientConfig(url.client_config(&bundle())))),
        " (it was registered by URL https://127.0.0.1:8443/mutate)"
    );
    assert_eq!(on_stop(&service, None), "");
    let both = Form { service: service.form().service, url: Some(URL.into()) };
    assert_eq!(
        both.to_string(),
        "Service watcher-system/watcher-operator:443/mutate and URL https://127.0.0.1:8443/mutate"
    );
    for text in [previous.to_string(), Replaced::Nothing.to_string()] {
        assert!(!text.contains("ByteString") && !text.contains("CERTIFICATE"), "{text}");
    }
}
