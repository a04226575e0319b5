use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::client::Body;
use serde_json::json;

use super::{Lifetimes, SelfManaged, Step, Stored, build_secret, next_step, prune_expired, read_secret};
use crate::registration::{Registrar, Registration, webhook_configuration};
use crate::{Authority, CertInfo, CertStore};

const DAY: Duration = Duration::from_secs(24 * 3600);

fn hosts() -> Vec<String> {
    crate::service_hosts("watcher-operator", "watcher-system")
}

fn lifetimes() -> Lifetimes {
    Lifetimes {
        ca: 300 * DAY,
        serving: 90 * DAY,
        rotation_settle: Duration::from_secs(600),
        check_every: Duration::from_secs(60),
    }
}

fn fresh() -> (Stored, Authority) {
    let (ca, ca_pem) = Authority::generate(300 * DAY).expect("CA");
    let serving = ca.issue(&hosts(), 90 * DAY).expect("serving");
    (Stored { bundle: ca_pem.cert_pem.clone(), ca: ca_pem, serving, rotated_at: None }, ca)
}

fn info(pem: &str) -> CertInfo {
    CertInfo::from_pem(pem).expect("parses")
}

#[test]
fn nothing_or_garbage_means_create() {
    let now = SystemTime::now();
    assert_eq!(next_step(None, &hosts(), now, &lifetimes()), Step::Create);
    let (mut stored, _) = fresh();
    stored.serving.cert_pem = "garbage".into();
    assert_eq!(next_step(Some(&stored), &hosts(), now, &lifetimes()), Step::Create);
}

#[test]
fn fresh_certificates_wait_for_the_serving_renewal() {
    let (stored, _) = fresh();
    let renewal = info(&stored.serving.cert_pem).renewal_time();
    assert_eq!(next_step(Some(&stored), &hosts(), SystemTime::now(), &lifetimes()), Step::Wait(renewal));
    assert_eq!(next_step(Some(&stored), &hosts(), renewal, &lifetimes()), Step::RenewServing);
}

#[test]
fn a_new_host_needs_a_new_serving_certificate() {
    let (stored, _) = fresh();
    let mut more = hosts();
    more.push("127.0.0.1".into());
    assert_eq!(next_step(Some(&stored), &more, SystemTime::now(), &lifetimes()), Step::RenewServing);
}

#[test]
fn ca_rotation_overlaps_and_waits_before_switching_the_serving_certificate() {
    // A CA due for rotation (day 60 of 90) while its serving certificate is still valid.
    let (ca, ca_pem) = Authority::generate(90 * DAY).expect("CA");
    let serving = ca.issue(&hosts(), 90 * DAY).expect("serving");
    let stored = Stored { bundle: ca_pem.cert_pem.clone(), ca: ca_pem, serving, rotated_at: None };
    let ca_due = info(&stored.ca.cert_pem).renewal_time();
    assert_eq!(next_step(Some(&stored), &hosts(), ca_due, &lifetimes()), Step::RotateCa);

    // After step 1: a new CA, the bundle holds both, the old serving certificate stays.
    let (_, new_ca) = Authority::generate(300 * DAY).expect("CA");
    let rotated = Stored {
        bundle: format!("{}{}", stored.bundle, new_ca.cert_pem),
        ca: new_ca,
        serving: stored.serving.clone(),
        rotated_at: Some(ca_due),
    };
    assert_eq!(CertInfo::all_from_pem(&rotated.bundle).expect("bundle").len(), 2);
    let settled = ca_due + lifetimes().rotation_settle;
    assert_eq!(next_step(Some(&rotated), &hosts(), ca_due, &lifetimes()), Step::Wait(settled));
    assert_eq!(next_step(Some(&rotated), &hosts(), settled, &lifetimes()), Step::RenewServing);
}

#[test]
fn expired_cas_leave_the_bundle() {
    let (old, old_pem) = Authority::generate(DAY).expect("short CA");
    let (new, new_pem) = Authority::generate(300 * DAY).expect("CA");
    let stored = Stored {
        bundle: format!("{}{}", old_pem.cert_pem, new_pem.cert_pem),
        ca: new_pem.clone(),
        serving: new.issue(&hosts(), 90 * DAY).expect("serving"),
        rotated_at: None,
    };
    drop(old);
    let after_old_expiry = info(&old_pem.cert_pem).not_after + Duration::from_secs(1);
    assert_eq!(next_step(Some(&stored), &hosts(), after_old_expiry, &lifetimes()), Step::PruneBundle);
    assert_eq!(prune_expired(&stored.bundle, after_old_expiry), new_pem.cert_pem);
    assert_eq!(prune_expired(&stored.bundle, SystemTime::now()), stored.bundle, "nothing expired yet");
}

#[test]
fn an_expired_ca_starts_over() {
    let (stored, _) = fresh();
    let expired = info(&stored.ca.cert_pem).not_after;
    assert_eq!(next_step(Some(&stored), &hosts(), expired, &lifetimes()), Step::Create);
}

#[test]
fn the_secret_round_trips() {
    let (mut stored, _) = fresh();
    stored.rotated_at = Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let secret = build_secret("watcher-system", &stored, None);
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let read = read_secret(&secret).expect("readable");
    assert_eq!(
        (read.ca, read.serving, read.bundle, read.rotated_at),
        (stored.ca, stored.serving, stored.bundle, stored.rotated_at)
    );
}

/// First start against an empty namespace: the Secret is created, its certificate served, and
/// the bundle written into the existing webhook configuration.
#[tokio::test]
async fn first_pass_creates_the_secret_and_publishes_the_bundle() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let manager = SelfManaged {
        client: kube::Client::new(service, "default"),
        namespace: "watcher-system".into(),
        hosts: hosts(),
        registrar: Registrar::new(
            Registration::Service { name: "watcher-operator".into(), namespace: "watcher-system".into() },
            "watcher-system",
        ),
        lifetimes: lifetimes(),
    };
    let server = tokio::spawn(async move {
        let secret_path = "/api/v1/namespaces/watcher-system/secrets/watcher-operator-tls";
        let (request, send) = handle.next_request().await.expect("GET secret");
        assert_eq!((request.method(), request.uri().path()), (&Method::GET, secret_path));
        send.send_response(json_response(
            StatusCode::NOT_FOUND,
            &json!({"kind": "Status", "code": 404, "reason": "NotFound"}),
        ));

        let (request, send) = handle.next_request().await.expect("POST secret");
        assert_eq!(
            (request.method(), request.uri().path()),
            (&Method::POST, "/api/v1/namespaces/watcher-system/secrets")
        );
        let secret: Secret = body_json(request).await;
        let bundle = secret.data.as_ref().and_then(|d| d.get("ca-bundle.crt")).cloned().expect("bundle");
        send.send_response(json_response(StatusCode::CREATED, &secret));

        let config_path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/watcher-operator";
        let (request, send) = handle.next_request().await.expect("GET webhook configuration");
        assert_eq!((request.method(), request.uri().path()), (&Method::GET, config_path));
        let service = Registration::Service { name: "watcher-operator".into(), namespace: "watcher-system".into() };
        let mut installed = webhook_configuration(service.client_config(&ByteString(vec![])), "watcher-system");
        installed.metadata.resource_version = Some("7".into());
        send.send_response(json_response(StatusCode::OK, &installed));

        let (request, send) = handle.next_request().await.expect("PUT webhook configuration");
        assert_eq!((request.method(), request.uri().path()), (&Method::PUT, config_path));
        let replaced: MutatingWebhookConfiguration = body_json(request).await;
        assert_eq!(replaced.metadata.resource_version.as_deref(), Some("7"), "optimistic concurrency");
        assert_eq!(replaced.webhooks.as_ref().expect("webhooks")[0].client_config.ca_bundle.as_ref(), Some(&bundle));
        send.send_response(json_response(StatusCode::OK, &replaced));
        assert!(handle.next_request().await.is_none(), "nothing more");
    });
    let store = Arc::new(CertStore::default());
    manager.reconcile(&store).await.expect("first pass");
    assert!(store.is_loaded(), "the new certificate is served at once");
    drop(manager);
    server.await.expect("scenario passed");
}

fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response<Body> {
    let bytes = serde_json::to_vec(body).expect("serialises");
    Response::builder().status(status).body(Body::from(bytes)).expect("response")
}

async fn body_json<T: serde::de::DeserializeOwned>(request: Request<Body>) -> T {
    let bytes = request.into_body().collect_bytes().await.expect("body");
    serde_json::from_slice(&bytes).expect("JSON body")
}
