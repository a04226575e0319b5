//! Every check against a mocked API server holding a healthy install, then with one thing
//! broken at a time: the exact line and hint a user reads.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use watcher_certs::Authority;

use super::{CheckOptions, Report, Status, check};

const DAY: Duration = Duration::from_secs(24 * 3600);
const CONFIG: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/watcher-operator";
const SECRET: &str = "/api/v1/namespaces/watcher-system/secrets/watcher-operator-tls";
const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/watcher-system/endpointslices";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/watcher-system/leases/watcher-operator";
const PODS: &str = "/api/v1/namespaces/default/pods";
const SSAR: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
const WATCHERS: &str = "/apis/watcher.dev/v1alpha1/watchers";
const CLUSTER_WATCHERS: &str = "/apis/watcher.dev/v1alpha1/clusterwatchers";

/// A cluster as the mocked API server answers it: objects by path; what a dry-run pod comes
/// back as; what access reviews answer.
struct Cluster {
    objects: HashMap<String, Value>,
    probe_patched: bool,
    allowed: bool,
}

fn timestamp(time: SystemTime) -> String {
    jiff::Timestamp::try_from(time).expect("time").to_string()
}

impl Cluster {
    /// `kubectl apply -k deploy/` and the operator running: everything as it should be.
    fn healthy() -> Self {
        let (ca, ca_pem) = Authority::generate(30 * DAY).expect("CA");
        let hosts = watcher_certs::service_hosts("watcher-operator", "watcher-system");
        let serving = ca.issue(&hosts, 10 * DAY).expect("serving");
        let mut objects = HashMap::new();
        objects.insert(
            "/version".into(),
            json!({"major": "1", "minor": "36", "gitVersion": "v1.36.2",
            "gitCommit": "", "gitTreeState": "", "buildDate": "", "goVersion": "", "compiler": "", "platform": ""}),
        );
        for crd in watcher_api::crds() {
            let mut installed = serde_json::to_value(&crd).expect("CRD");
            installed["status"] = json!({"conditions": [{"type": "Established", "status": "True"}]});
            let name = crd.metadata.name.expect("name");
            objects.insert(format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"), installed);
        }
        let mut config: Value =
            serde_saphyr::from_str(include_str!("../../../deploy/webhook.yaml")).expect("deploy/webhook.yaml");
        config["webhooks"][0]["clientConfig"]["caBundle"] =
            serde_json::to_value(k8s_openapi::ByteString(ca_pem.cert_pem.clone().into_bytes())).expect("base64");
        config["webhooks"][0]["clientConfig"].as_object_mut().expect("object").remove("url");
        // One Watcher selecting pods by label, and the matchConditions the leader wrote for it.
        let watcher = json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
            "metadata": {"name": "log-watcher", "namespace": "team-a"},
            "spec": {"container": {"name": "log-watcher", "image": "busybox:1.36"},
                     "selector": {"matchLabels": {"app": "web"}}}});
        let namespaces = json!({"apiVersion": "v1", "kind": "NamespaceList", "metadata": {}, "items": [
            {"metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "team-a"}}}]});
        objects.insert(WATCHERS.into(), json!({"metadata": {}, "items": [watcher.clone()]}));
        objects.insert(CLUSTER_WATCHERS.into(), json!({"metadata": {}, "items": []}));
        objects.insert("/apis/watcher.dev/v1alpha1/imagepolicies".into(), json!({"metadata": {}, "items": []}));
        objects.insert("/api/v1/namespaces".into(), namespaces);
        objects.insert("/api/v1/limitranges".into(), json!({"metadata": {}, "items": []}));
        objects.insert("/api/v1/resourcequotas".into(), json!({"metadata": {}, "items": []}));
        let watcher: watcher_api::Watcher = serde_json::from_value(watcher).expect("Watcher");
        let labels =
            std::collections::BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), "team-a".to_owned())]);
        let scope = watcher_admission::Scope::compute(
            [&watcher],
            &[] as &[watcher_api::CompiledPolicy],
            [("team-a", &labels)],
            "watcher-system",
        );
        let mut typed: k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration =
            serde_json::from_value(config).expect("configuration");
        watcher_controller::scope::apply(&mut typed, &scope.conditions(), None);
        objects.insert(CONFIG.into(), serde_json::to_value(typed).expect("JSON"));
        let bytes = |s: &str| serde_json::to_value(k8s_openapi::ByteString(s.as_bytes().to_vec())).expect("base64");
        objects.insert(
            SECRET.into(),
            json!({"metadata": {"name": "watcher-operator-tls"},
                   "data": {"tls.crt": bytes(&serving.cert_pem), "ca.crt": bytes(&ca_pem.cert_pem)}}),
        );
        objects.insert(
            "/api/v1/namespaces/watcher-system/services/watcher-operator".into(),
            json!({"metadata": {"name": "watcher-operator"}}),
        );
        objects.insert(
            SLICES.into(),
            json!({"metadata": {}, "items": [{"metadata": {"name": "watcher-operator-x"}, "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.0.0.7"], "conditions": {"ready": true}},
                              {"addresses": ["10.0.0.8"], "conditions": {"ready": false}}]}]}),
        );
        objects.insert(
            "/apis/apps/v1/namespaces/watcher-system/deployments/watcher-operator".into(),
            json!({"metadata": {"name": "watcher-operator"}, "spec": {"replicas": 2, "selector": {},
                   "template": {}}, "status": {"availableReplicas": 2}}),
        );
        objects.insert(
            LEASE.into(),
            json!({"metadata": {"name": "watcher-operator"}, "spec": {"holderIdentity": "watcher-operator-7d9f-abc",
                   "leaseDurationSeconds": 15, "renewTime": timestamp(SystemTime::now() - Duration::from_secs(3))}}),
        );
        objects.insert(
            "/api/v1/namespaces/default".into(),
            json!({"metadata": {"name": "default", "labels": {"kubernetes.io/metadata.name": "default"}}}),
        );
        objects.insert(
            "/apis/admissionregistration.k8s.io/v1".into(),
            json!({"groupVersion": "admissionregistration.k8s.io/v1", "resources": []}),
        );
        Self { objects, probe_patched: true, allowed: true }
    }

    fn without(mut self, path: &str) -> Self {
        self.objects.remove(path);
        self
    }

    fn edit(mut self, path: &str, edit: impl FnOnce(&mut Value)) -> Self {
        edit(self.objects.get_mut(path).expect("object"));
        self
    }

    /// Runs `check` against this cluster.
    async fn check(self, pre: bool) -> Report {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let server = tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (method, path) = (request.method().clone(), request.uri().path().to_owned());
                let body = request.into_body().collect_bytes().await.expect("body");
                let (status, answer) = self.answer(&method, &path, &body);
                let bytes = serde_json::to_vec(&answer).expect("JSON");
                send.send_response(Response::builder().status(status).body(Body::from(bytes)).expect("response"));
            }
        });
        let client = kube::Client::new(service, "default");
        let options = CheckOptions { namespace: "watcher-system".into(), probe_namespace: "default".into(), pre };
        let report = check(&client, &options).await;
        drop(client);
        server.await.expect("server");
        report
    }

    fn answer(&self, method: &Method, path: &str, body: &[u8]) -> (StatusCode, Value) {
        match (method.as_str(), path) {
            ("POST", PODS) => {
                let mut pod: Value = serde_json::from_slice(body).expect("pod");
                if self.probe_patched {
                    pod["metadata"]["annotations"]["watcher.dev/probed"] = json!("0.1.0");
                }
                (StatusCode::CREATED, pod)
            }
            // The Pod Security defaults' dry-run pods, in a namespace without labels: a cluster
            // that enforces nothing there.
            ("POST", path) if path.starts_with("/api/v1/namespaces/") && path.ends_with("/pods") => {
                (StatusCode::CREATED, serde_json::from_slice(body).expect("pod"))
            }
            ("POST", SSAR) => {
                let mut review: Value = serde_json::from_slice(body).expect("review");
                review["status"] =
                    json!({"allowed": self.allowed, "reason": if self.allowed { "" } else { "RBAC: no rule" }});
                (StatusCode::CREATED, review)
            }
            ("GET", path) => match self.objects.get(path) {
                Some(object) => (StatusCode::OK, object.clone()),
                None => (
                    StatusCode::NOT_FOUND,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
                ),
            },
            other => panic!("unexpected request {other:?}"),
        }
    }
}

fn line(report: &Report, name: &str) -> (Status, String, Option<String>) {
    let check = report.get(name).unwrap_or_else(|| panic!("no check {name} in {report:#?}"));
    (check.status, check.message.clone(), check.hint.clone())
}

fn failed(report: &Report) -> Vec<&str> {
    report.checks.iter().filter(|c| c.status == Status::Failed).map(|c| c.name.as_str()).collect()
}

#[tokio::test]
async fn a_healthy_install_passes_every_check() {
    let report = Cluster::healthy().check(false).await;
    assert!(report.ok(), "{}", report.text());
    assert!(report.checks.iter().all(|c| c.status == Status::Passed), "{}", report.text());
    let names: Vec<&str> = report.checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "API server",
            "native sidecars",
            "watchers.watcher.dev",
            "clusterwatchers.watcher.dev",
            "ats.watcher.dev",
            "podsets.watcher.dev",
            "imagepolicies.watcher.dev",
            "webhook configuration",
            "failure policy",
            "caBundle",
            "serving certificate",
            "pod security defaults",
            "pod security",
            "agent configuration",
            "resource rules",
            "scope",
            "Service endpoints",
            "pods that end",
            "Deployment",
            "leader Lease",
            "admission probe",
        ]
    );
    assert_eq!(line(&report, "Service endpoints").1, "Service watcher-system/watcher-operator has 1 ready endpoint(s)");
    assert_eq!(
        line(&report, "admission probe").1,
        "a dry-run pod in default came back patched by the webhook (watcher-operator 0.1.0)"
    );
    assert_eq!(
        line(&report, "scope").1,
        "1 Watcher (1 selecting pods by label, 0 required), 0 ImagePolicies: only the pods they apply to are sent \
         (matchConditions up to date)"
    );
    assert!(report.text().ends_with("Status: √ every check passed\n"));
}

/// The scope: conditions behind the Watchers, a required Watcher without its webhook, a
/// fallback the operator recorded, and a server without matchConditions, each a warning that
/// says what it means.
#[tokio::test]
async fn the_admission_scope_warns_when_it_does_not_hold() {
    let selector_changed = Cluster::healthy()
        .edit(WATCHERS, |list| list["items"][0]["spec"]["selector"] = json!({"matchLabels": {"app": "api"}}))
        .check(false)
        .await;
    let (status, message, _) = line(&selector_changed, "scope");
    assert_eq!(status, Status::Warning);
    assert!(message.ends_with("the matchConditions in place are not yet what they need"), "{message}");

    // A ClusterWatcher selecting pods in team-a: its pods are not in the conditions yet.
    let cluster_watcher = Cluster::healthy()
        .edit(CLUSTER_WATCHERS, |list| {
            list["items"] = json!([{"apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher",
                "metadata": {"name": "log-agent"},
                "spec": {"container": {"name": "log-agent", "image": "busybox:1.36"},
                         "selector": {"matchLabels": {"tier": "backend"}}}}])
        })
        .check(false)
        .await;
    let (status, message, _) = line(&cluster_watcher, "scope");
    assert_eq!(status, Status::Warning);
    assert!(message.starts_with("1 Watcher and 1 ClusterWatcher (2 selecting pods by label, 0 required)"), "{message}");

    let required = Cluster::healthy()
        .edit(WATCHERS, |list| list["items"][0]["spec"]["failurePolicy"] = json!("Fail"))
        .check(false)
        .await;
    let (status, message, _) = line(&required, "required Watchers");
    assert_eq!(status, Status::Warning);
    assert_eq!(message, "1, but required.watcher.dev is not registered: an outage admits their pods");

    let fallback = Cluster::healthy()
        .edit(CONFIG, |c| {
            c["metadata"]["annotations"] = json!({"watcher.dev/admission-scope": "kube-apiserver refused the matchConditions (x): every pod of a served namespace is sent"})
        })
        .check(false)
        .await;
    let (status, message, _) = line(&fallback, "scope");
    assert_eq!(status, Status::Warning);
    assert!(message.contains("refused the matchConditions"), "{message}");

    let old = Cluster::healthy()
        .edit("/version", |v| {
            v["minor"] = json!("27");
            v["gitVersion"] = json!("v1.27.16");
        })
        .check(false)
        .await;
    let (status, message, _) = line(&old, "scope");
    assert_eq!(status, Status::Warning);
    assert!(message.starts_with("Kubernetes v1.27.16 has no webhook matchConditions (1.28 or later)"), "{message}");
    assert!(old.ok(), "warnings only");
}

#[tokio::test]
async fn a_missing_webhook_configuration_is_named_and_explains_the_probe() {
    let report = Cluster { probe_patched: false, ..Cluster::healthy().without(CONFIG) }.check(false).await;
    assert_eq!(
        line(&report, "webhook configuration"),
        (
            Status::Failed,
            "MutatingWebhookConfiguration watcher-operator not found: no pod is injected".into(),
            Some(
                "install the operator (`helm install watcher-operator charts/watcher-operator -n watcher-system \
                 --create-namespace`, or `kubectl apply -k deploy/`); outside the cluster, \
                 `watcher-operator run --webhook-url https://HOST:8443/mutate` creates it"
                    .into()
            )
        )
    );
    let (status, message, _) = line(&report, "admission probe");
    assert_eq!(status, Status::Failed);
    assert!(message.contains("came back without the webhook's patch"), "{message}");
    assert!(
        message.ends_with(
            "likely cause: webhook configuration: MutatingWebhookConfiguration watcher-operator not found: no pod is injected"
        ),
        "{message}"
    );
    assert!(!report.ok());
}

#[tokio::test]
async fn a_ca_bundle_that_does_not_sign_the_serving_certificate_fails() {
    let (_, other) = Authority::generate(30 * DAY).expect("another CA");
    let bundle = serde_json::to_value(k8s_openapi::ByteString(other.cert_pem.into_bytes())).expect("base64");
    let report =
        Cluster::healthy().edit(CONFIG, |c| c["webhooks"][0]["clientConfig"]["caBundle"] = bundle).check(false).await;
    assert_eq!(
        line(&report, "serving certificate"),
        (
            Status::Failed,
            "Secret watcher-system/watcher-operator-tls for watcher-operator.watcher-system.svc: the serving certificate \
             is not signed by a CA of the bundle"
                .into(),
            Some(
                "kube-apiserver refuses such a certificate; the operator re-issues it and the caBundle; see why in the \
                 operator's log: `kubectl -n watcher-system logs deploy/watcher-operator`"
                    .into()
            )
        )
    );
    assert_eq!(failed(&report), ["serving certificate"]);
}

#[tokio::test]
async fn an_empty_ca_bundle_fails() {
    let report = Cluster::healthy()
        .edit(CONFIG, |c| {
            c["webhooks"][0]["clientConfig"].as_object_mut().expect("object").remove("caBundle").map(drop).unwrap_or(())
        })
        .check(false)
        .await;
    let (status, message, hint) = line(&report, "caBundle");
    assert_eq!((status, message.as_str()), (Status::Failed, "empty: kube-apiserver cannot verify the webhook"));
    assert!(hint.is_some_and(|h| h.starts_with("the operator writes it when it runs")));
}

#[tokio::test]
async fn a_service_without_ready_endpoints_fails() {
    let report = Cluster::healthy().edit(SLICES, |list| list["items"][0]["endpoints"] = json!([])).check(false).await;
    assert_eq!(
        line(&report, "Service endpoints"),
        (
            Status::Failed,
            "Service watcher-system/watcher-operator has no ready endpoints: kube-apiserver cannot reach the webhook"
                .into(),
            Some(
                "are the operator's pods running and ready? `kubectl -n watcher-system get pods -l \
                 app.kubernetes.io/name=watcher-operator`, then `kubectl -n watcher-system describe pods`"
                    .into()
            )
        )
    );
}

#[tokio::test]
async fn an_expired_lease_fails() {
    let stale = timestamp(SystemTime::now() - Duration::from_secs(300));
    let report = Cluster::healthy().edit(LEASE, |lease| lease["spec"]["renewTime"] = json!(stale)).check(false).await;
    assert_eq!(
        line(&report, "leader Lease"),
        (
            Status::Failed,
            "held by watcher-operator-7d9f-abc, last renewed 5m ago (it lasts 15s): no replica runs the controllers"
                .into(),
            Some(
                "the holder stopped or lost the API server; `kubectl -n watcher-system get pods` and \
                 `kubectl -n watcher-system logs deploy/watcher-operator`"
                    .into()
            )
        )
    );
}

#[tokio::test]
async fn crds_older_than_the_binary_fail() {
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/watchers.watcher.dev";
    let report = Cluster::healthy()
        .edit(path, |crd| {
            let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
            spec.as_object_mut().expect("properties").remove("updatePolicy");
        })
        .check(false)
        .await;
    let (status, message, hint) = line(&report, "watchers.watcher.dev");
    assert_eq!(status, Status::Failed);
    assert!(message.starts_with("older than this binary: v1alpha1 lacks spec.updatePolicy"), "{message}");
    assert_eq!(
        hint.as_deref(),
        Some(
            "upgrade the CRDs to this binary's (Helm does not): watcher-operator crds | kubectl apply --server-side -f -"
        )
    );
    let missing = Cluster::healthy().without(path).check(false).await;
    assert_eq!(line(&missing, "watchers.watcher.dev").1, "not installed");
}

const WATCHERS_CRD: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/watchers.watcher.dev";

/// The Watcher CRD as kube-apiserver 1.24 stored it (`controller/fixtures/apiserver/`), as is.
fn stored_1_24() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../controller/fixtures/apiserver/crd-watchers-stored-1.24.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
}

fn at_version(minor: &str) -> impl FnOnce(&mut Value) {
    let minor = minor.to_owned();
    move |v: &mut Value| {
        v["minor"] = json!(minor);
        v["gitVersion"] = json!(format!("v1.{minor}.0"));
    }
}

/// A healthy install on kube-apiserver 1.24, with the Watcher CRD as 1.24 stored it (captured).
fn stored_on_1_24() -> Cluster {
    Cluster::healthy().edit("/version", at_version("24")).edit(WATCHERS_CRD, |crd| *crd = stored_1_24())
}

/// Every `x-kubernetes-validations` dropped, as 1.24 drops them (the fixture shows it does).
fn without_rules(value: &mut Value) {
    super::crds::strip_validation_rules(value);
}

/// 1.24 stores the CRDs without their CEL rules: not a difference. The same CRDs on 1.25 or
/// later, which keeps rules, are older than this binary.
#[tokio::test]
async fn a_server_without_cel_stores_no_rules_and_that_is_no_difference() {
    let fixture = stored_1_24();
    assert!(!fixture.to_string().contains("x-kubernetes-validations"), "1.24 stored no rule");
    let mut cluster = Cluster::healthy().edit("/version", at_version("24"));
    let names: Vec<String> = watcher_api::crds().iter().map(kube::ResourceExt::name_any).collect();
    for name in &names {
        cluster =
            cluster.edit(&format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"), without_rules);
    }
    let report = cluster.check(false).await;
    let (status, message, _) = line(&report, "watchers.watcher.dev");
    assert_eq!(status, Status::Passed, "{message}");
    assert!(message.contains("Kubernetes v1.24.0 stores no CEL rules"), "{message}");
    for name in &names {
        assert_eq!(line(&report, name).0, Status::Passed, "{name}");
    }

    let report = Cluster::healthy().edit(WATCHERS_CRD, without_rules).check(false).await;
    let (status, message, _) = line(&report, "watchers.watcher.dev");
    assert_eq!(status, Status::Failed);
    assert!(message.starts_with("the v1alpha1 schema differs from this binary's at "), "{message}");
    assert!(message.contains("spec.selector.matchExpressions[] (x-kubernetes-validations)"), "{message}");
}

/// The fields added after the 1.24 capture: those that let the sidecar see the app, the canary
/// that holds at admission and its revisions in the status, the configuration generation held.
const APP_FIELDS: [&str; 15] = [
    "spec.shareVolumes",
    "spec.appVolumeMounts",
    "spec.appContainers",
    "spec.transferEnv",
    "spec.shareProcessNamespace",
    "spec.podAnnotations",
    "spec.initContainers",
    "spec.automountServiceAccountToken",
    "spec.updatePolicy.selector",
    "spec.updatePolicy.newPods",
    "status.currentRevision",
    "status.stableRevision",
    "status.pods.cannotStart",
    "status.pods.cannotEnd",
    "status.configGeneration",
];

/// What the Watcher CRD gained after the 1.24 capture: bounds (on what rules read, then on
/// everything under the spec-wide rules), the fields that let the sidecar see the app, the
/// canary's (and `updatePolicy`'s default, which now names `newPods`), and a description that
/// now names a page of docs/.
fn added_since_1_24_capture(difference: &str) -> bool {
    ["(maxProperties)", "(maxItems)", "(maxLength)"].iter().any(|bound| difference.ends_with(bound))
        || difference == "spec.failurePolicy (description)"
        || difference == "spec.updatePolicy (default)"
        || APP_FIELDS.iter().any(|field| difference.starts_with(&format!("{field} ")))
}

/// The CRD kube-apiserver 1.24 stored, as captured: on 1.24 its missing rules are no
/// difference, and what remains is only the bounds this binary added after the capture; the
/// same object on a server that keeps rules also lacks the rules.
#[tokio::test]
async fn the_stored_1_24_crd_differs_only_by_the_bounds_added_since() {
    // What 1.24 did to the CRD is what `strip_validation_rules` does: the stored fixture and
    // the binary's CRD so stripped have the same properties and the same keywords but bounds.
    let mut stored = stored_1_24();
    let mut ours = serde_json::to_value(watcher_api::crds().remove(0)).expect("JSON");
    without_rules(&mut ours);
    // Numbers compared by value, as `check` compares them (the server returns 1 for 1.0).
    let schema =
        |crd: &mut Value| super::crds::normalized(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].take());
    let mut differences = Vec::new();
    super::crds::keyword_differences(&schema(&mut ours), &schema(&mut stored), "", &mut differences);
    assert!(differences.iter().all(|d| added_since_1_24_capture(d)), "{differences:?}");

    // On 1.24 `check` names what the stored CRD lacks: the app fields, nothing else.
    let on_1_24 = stored_on_1_24().check(false).await;
    let (_, message, _) = line(&on_1_24, "watchers.watcher.dev");
    let lacks = message.strip_prefix("older than this binary: v1alpha1 lacks ").expect(&message);
    let lacks = lacks.split(" (").next().unwrap_or(lacks);
    for field in lacks.split(", ") {
        assert!(APP_FIELDS.iter().any(|f| field.starts_with(f)), "{field} in {message}");
    }
    let on_1_36 = Cluster::healthy().edit(WATCHERS_CRD, |crd| *crd = stored_1_24()).check(false).await;
    let (status, message, _) = line(&on_1_36, "watchers.watcher.dev");
    assert_eq!(status, Status::Failed);
    // The missing fields by name, not their own properties, and how many more.
    assert_eq!(
        message,
        "older than this binary: v1alpha1 lacks spec.appContainers, spec.appVolumeMounts, \
         spec.automountServiceAccountToken, spec.initContainers, spec.podAnnotations and 10 more"
    );
}

#[tokio::test]
async fn a_probe_pod_returned_unpatched_fails() {
    let report = Cluster { probe_patched: false, ..Cluster::healthy() }.check(false).await;
    assert_eq!(
        line(&report, "admission probe"),
        (
            Status::Failed,
            "a dry-run pod in default came back without the webhook's patch: kube-apiserver did not reach the webhook \
             (failurePolicy Ignore let the pod through without an error)"
                .into(),
            Some("fix the failed checks above; kube-apiserver's log names the error (`failed calling webhook`)".into())
        )
    );
    assert_eq!(failed(&report), ["admission probe"]);
}

#[tokio::test]
async fn a_registration_by_url_skips_the_service_and_deployment_and_checks_the_url_host() {
    let report = Cluster::healthy()
        .edit(CONFIG, |c| {
            let client_config = c["webhooks"][0]["clientConfig"].as_object_mut().expect("object");
            client_config.remove("service");
            client_config.insert("url".into(), json!("https://127.0.0.1:8443/mutate"));
        })
        .check(false)
        .await;
    let skipped = "skipped: the webhook is registered by URL (the operator runs outside the cluster)";
    assert_eq!(line(&report, "Service endpoints"), (Status::Passed, skipped.into(), None));
    assert_eq!(line(&report, "Deployment"), (Status::Passed, skipped.into(), None));
    // The serving certificate of the healthy install names the Service only.
    assert_eq!(
        line(&report, "serving certificate").1,
        "Secret watcher-system/watcher-operator-tls for 127.0.0.1: the serving certificate does not name 127.0.0.1"
    );
}

#[tokio::test]
async fn failure_policy_fail_is_a_warning_unless_the_scope_narrows_it() {
    let scoped =
        Cluster::healthy().edit(CONFIG, |c| c["webhooks"][0]["failurePolicy"] = json!("Fail")).check(false).await;
    let (status, message, _) = line(&scoped, "failure policy");
    assert_eq!(status, Status::Passed, "{message}");
    let report = Cluster::healthy()
        .edit(CONFIG, |c| {
            c["webhooks"][0]["failurePolicy"] = json!("Fail");
            c["webhooks"][0].as_object_mut().expect("webhook").remove("matchConditions");
        })
        .check(false)
        .await;
    let (status, message, _) = line(&report, "failure policy");
    assert_eq!(status, Status::Warning);
    assert_eq!(message, "Fail: no pod of a selected namespace can be created while the webhook is unreachable");
    assert!(report.ok(), "a warning is not a failure");
}

#[tokio::test]
async fn pre_checks_the_version_the_api_and_permissions() {
    let report = Cluster::healthy().without(CONFIG).check(true).await;
    assert!(report.ok(), "{}", report.text());
    assert_eq!(report.checks.iter().filter(|c| c.group == "permissions").count(), super::cluster::INSTALLED.len() + 2);
    assert_eq!(
        line(&report, "no MutatingWebhookConfiguration in the way"),
        (Status::Passed, "MutatingWebhookConfiguration watcher-operator does not exist yet".into(), None)
    );

    let old = Cluster { allowed: false, ..Cluster::healthy() }
        .edit("/version", |v| {
            v["minor"] = json!("23");
            v["gitVersion"] = json!("v1.23.17");
        })
        .check(true)
        .await;
    assert_eq!(
        line(&old, "API server").1,
        "Kubernetes v1.23.17 is older than 1.24, the oldest watcher-operator supports"
    );
    assert_eq!(line(&old, "native sidecars").0, Status::Warning);
    assert_eq!(
        line(&old, "create ClusterRole"),
        (
            Status::Failed,
            "not allowed: RBAC: no rule".into(),
            Some(
                "install as a cluster administrator: the install creates cluster-wide objects (CRDs, a ClusterRole, \
                 the webhook configuration)"
                    .into()
            )
        )
    );
    assert_eq!(line(&old, "create Deployment").1, "not allowed in namespace watcher-system: RBAC: no rule");
}

/// `--pre` names a webhook configuration `helm install` would refuse, and what to do about it:
/// a killed run's leftover, one from `deploy/`, and none in the way of a Helm release.
#[tokio::test]
async fn pre_names_a_webhook_configuration_helm_cannot_adopt() {
    let leftover = Cluster::healthy()
        .edit(CONFIG, |c| {
            c["metadata"]["annotations"] = json!({"watcher.dev/created-by-run": "https://127.0.0.1:8443/mutate"});
        })
        .check(true)
        .await;
    let (status, message, hint) = line(&leftover, "no MutatingWebhookConfiguration in the way");
    assert_eq!(status, Status::Warning);
    assert_eq!(
        message,
        "MutatingWebhookConfiguration watcher-operator exists, created by a run outside the cluster \
         (--webhook-url https://127.0.0.1:8443/mutate) that was not stopped gracefully: `helm install` will refuse to adopt it"
    );
    let hint = hint.expect("hint");
    assert!(hint.contains("kubectl delete mutatingwebhookconfiguration watcher-operator"), "{hint}");
    assert!(hint.contains("--take-ownership"), "{hint}");
    assert!(leftover.ok(), "a warning: kubectl apply -k deploy/ still works");

    let deployed = Cluster::healthy().check(true).await;
    assert!(line(&deployed, "no MutatingWebhookConfiguration in the way").1.contains("not installed by Helm"));

    let released = Cluster::healthy()
        .edit(CONFIG, |c| {
            c["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "Helm"});
            c["metadata"]["annotations"] = json!({"meta.helm.sh/release-name": "watcher-operator"});
        })
        .check(true)
        .await;
    assert_eq!(line(&released, "no MutatingWebhookConfiguration in the way").0, Status::Passed);
}

/// `--pre` on CRDs installed already: fine from 1.25; on 1.24 (rules dropped) `helm install`
/// needs `--skip-crds`.
#[tokio::test]
async fn pre_says_when_helm_must_skip_the_installed_crds() {
    let fresh = Cluster::healthy().without(WATCHERS_CRD).check(true).await;
    assert_eq!(line(&fresh, "CRDs").0, Status::Passed);
    assert!(line(&fresh, "CRDs").1.starts_with("not installed yet"));
    let modern = Cluster::healthy().check(true).await;
    assert_eq!(line(&modern, "CRDs").0, Status::Passed);
    let old = stored_on_1_24().check(true).await;
    let (status, message, hint) = line(&old, "CRDs");
    assert_eq!(status, Status::Warning, "{message}");
    assert!(message.contains("Kubernetes v1.24.0 stores them without their CEL rules"), "{message}");
    assert_eq!(
        hint.as_deref(),
        Some("with Helm, install the chart with `helm install --skip-crds` (`kubectl apply -k deploy/` needs nothing)")
    );
}

/// `--pre` asks about every kind the install creates: the kinds of `deploy/`'s files.
#[test]
fn pre_covers_every_kind_deploy_installs() {
    let files = [
        "namespace.yaml",
        "crds/crds.yaml",
        "rbac.yaml",
        "deployment.yaml",
        "pdb.yaml",
        "service.yaml",
        "webhook.yaml",
    ];
    let kustomization = include_str!("../../../deploy/kustomization.yaml");
    for file in files {
        assert!(kustomization.contains(&format!("- {file}")), "{file} listed in kustomization.yaml");
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut kinds: Vec<String> = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(format!("{root}/deploy/{file}")).expect("deploy file");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
        kinds.extend(docs.iter().filter_map(|d| d["kind"].as_str().map(str::to_owned)));
    }
    for kind in &kinds {
        assert!(super::cluster::INSTALLED.iter().any(|(_, _, k, _)| k == kind), "--pre does not ask about {kind}");
    }
}

/// `check` names the Watchers that cannot comply with the level a namespace they apply in
/// enforces, and those whose image must run as non-root there.
#[test]
fn pod_security_lists_the_watchers_that_cannot_comply() {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    let watcher = |name: &str, security: Value| -> Arc<watcher_api::Watcher> {
        Arc::new(
            serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
                "metadata": {"name": name, "namespace": "shop"},
                "spec": {"container": {"name": name, "image": "busybox:1.36", "securityContext": security}}}))
            .expect("Watcher"),
        )
    };
    let everywhere = [
        ("shop".to_owned(), watcher("privileged", json!({"privileged": true}))),
        ("shop".to_owned(), watcher("plain", json!({}))),
        ("open".to_owned(), watcher("privileged", json!({"privileged": true}))),
    ];
    let restricted = BTreeMap::from([("pod-security.kubernetes.io/enforce".to_owned(), "restricted".to_owned())]);
    let none = BTreeMap::new();
    let mut report = Report::default();
    let unconfigured = watcher_admission::pod_security::ClusterDefaults::default();
    super::pod_security::pod_security(
        &mut report,
        &everywhere,
        [("shop", &restricted), ("open", &none)],
        &unconfigured,
        Some(36),
    );
    let lines: Vec<(&str, Status, &str)> =
        report.checks.iter().map(|c| (c.name.as_str(), c.status, c.message.as_str())).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0].1, Status::Warning);
    assert_eq!(
        lines[0].2,
        "1 cannot comply, and their pods are admitted without them: Watcher privileged in shop \
         (restricted:latest): privileged (container \"privileged\" must not set securityContext.privileged=true)"
    );
    assert_eq!(lines[1].1, Status::Passed);
    assert!(
        lines[1].2.ends_with(
            "given runAsUser 65532 where the pod sets none either (an image whose files need \
                                   another user: set the Watcher's securityContext.runAsUser): Watcher plain in shop \
                                   (restricted:latest)"
        ),
        "{}",
        lines[1].2
    );

    // A cluster that enforces baseline where namespaces set no level: the privileged Watcher
    // cannot comply in `open` too, unless the cluster exempts that namespace.
    let mut report = Report::default();
    let baseline = crate::pod_security_config::parse("defaults: {enforce: baseline}").expect("configuration");
    super::pod_security::pod_security(
        &mut report,
        &everywhere,
        [("shop", &restricted), ("open", &none)],
        &baseline,
        Some(36),
    );
    assert!(report.checks[0].message.starts_with("2 cannot comply"), "{}", report.checks[0].message);
    assert!(report.checks[0].message.contains("Watcher privileged in open (baseline:latest)"));
    let exempt = crate::pod_security_config::parse("defaults: {enforce: baseline}\nexemptions: {namespaces: [open]}")
        .expect("configuration");
    let mut report = Report::default();
    super::pod_security::pod_security(
        &mut report,
        &everywhere,
        [("shop", &restricted), ("open", &none)],
        &exempt,
        Some(36),
    );
    assert!(report.checks[0].message.starts_with("1 cannot comply"), "{}", report.checks[0].message);
}

/// The operator as `deploy/` installs it ends the sidecars of pods that are meant to end; one
/// whose `--controllers` leaves out `pods` is warned about, naming what it runs.
#[test]
fn an_operator_without_the_pods_controller_is_warned_about() {
    use k8s_openapi::api::apps::v1::Deployment;
    let text = include_str!("../../../deploy/deployment.yaml");
    let deployment: Deployment = serde_saphyr::from_str(text).expect("deploy/deployment.yaml");
    let ok = super::operator::pods_that_end(&deployment).expect("deploy/ runs every controller");
    assert!(ok.contains("supervisor image watcher-supervise:0.2.0"), "{ok}");
    let mut partial = deployment.clone();
    let container = &mut partial.spec.as_mut().expect("spec").template.spec.as_mut().expect("pod").containers[0];
    container.args.get_or_insert_default().push("--controllers=watcher,at".into());
    let warned = super::operator::pods_that_end(&partial).expect_err("no pods controller");
    assert!(warned.contains("controllers watcher,at, not `pods`"), "{warned}");
    let mut chart = deployment;
    let container = &mut chart.spec.as_mut().expect("spec").template.spec.as_mut().expect("pod").containers[0];
    let env = container.env.get_or_insert_default();
    env.push(k8s_openapi::api::core::v1::EnvVar {
        name: "WATCHER_CONTROLLERS".into(),
        value: Some("watcher,pods".into()),
        ..Default::default()
    });
    assert!(super::operator::pods_that_end(&chart).is_ok());
}
