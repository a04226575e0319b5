//! AdmissionReview in, AdmissionReview out: decoding, the call to [`inject_guarded`], and every way a
//! request can be wrong mapped to a clear answer.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use kube::core::admission::Operation;
use serde::Serialize;
use tracing::{debug, info, warn};
use watcher_admission::json::{self, Text};
use watcher_admission::{
    Guards, InjectOptions, Injection, PodView, PolicySource, RevisionSource, WatcherSource, inject_guarded, narrow,
    rewrite_images,
};
use watcher_api::{INJECTION_DISABLED, INJECTION_LABEL, PROBE_ANNOTATION, PROBED_ANNOTATION, SCOPE_PROBE_ANNOTATION};

use crate::metrics::{AdmissionResult, PodSecurityOutcome, ResourceOutcome};

/// A request that cannot be answered with an AdmissionReview (HTTP 400): there is no uid to echo.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The body is not an `admission.k8s.io/v1` AdmissionReview.
    #[error("not an AdmissionReview: {0}")]
    Decode(String),
    /// The AdmissionReview has no `request`.
    #[error("the AdmissionReview has no request")]
    NoRequest,
    /// The body holds bytes that are not UTF-8, so it is not JSON.
    #[error("not an AdmissionReview: the body is not UTF-8 ({0})")]
    NotUtf8(std::str::Utf8Error),
}

/// An `admission.k8s.io/v1` AdmissionReview, as far as the webhook reads it. Strings the
/// answer does not carry are borrowed from the body.
#[derive(Default)]
struct Review<'de> {
    request: Option<Request<'de>>,
}

/// The fields of an AdmissionRequest the webhook uses, the object read as a pod.
#[derive(Default)]
struct Request<'de> {
    uid: Option<String>,
    kind: Option<Kind<'de>>,
    namespace: Option<Text<'de>>,
    operation: Option<Operation>,
    object: Option<PodView>,
    dry_run: bool,
    user_info: Option<UserInfo<'de>>,
}

/// Who asked: Pod Security admission may exempt a user.
#[derive(Default)]
struct UserInfo<'de> {
    username: Option<Text<'de>>,
}

/// The request's `kind`.
#[derive(Default)]
struct Kind<'de> {
    group: Text<'de>,
    version: Text<'de>,
    kind: Text<'de>,
}

/// The review without its object: what a body whose object is no pod still tells.
#[derive(Default)]
struct Head<'de> {
    request: Option<RequestHead<'de>>,
}

#[derive(Default)]
struct RequestHead<'de> {
    uid: Option<String>,
    kind: Option<Kind<'de>>,
    namespace: Option<Text<'de>>,
}

narrow!(Review<'de> { request: "request" });
narrow!(Request<'de> {
    uid: "uid",
    kind: "kind",
    namespace: "namespace",
    operation: "operation",
    object: "object",
    dry_run: "dryRun",
    user_info: "userInfo",
});
narrow!(UserInfo<'de> { username: "username" });
narrow!(Kind<'de> { group: "group", version: "version", kind: "kind" });
narrow!(Head<'de> { request: "request" });
narrow!(RequestHead<'de> { uid: "uid", kind: "kind", namespace: "namespace" });

/// An AdmissionReview as read from its body ([`read`]): a request to answer, or a body that is
/// answered as it is (its object is no pod, or cannot be read as one).
pub struct Read<'de>(Reading<'de>);

// Every review but a rare bad one is a request: boxing it would cost an allocation each.
#[expect(clippy::large_enum_variant, reason = "the request is the common case, read in place")]
enum Reading<'de> {
    Request { uid: String, kind: Kind<'de>, request: Request<'de> },
    Answered(Answer, AdmissionResult),
}

/// Reads one AdmissionReview body: the first step of [`Reviewer::review`], apart for the benches.
pub fn read(body: &[u8]) -> Result<Read<'_>, ReviewError> {
    // One pass: the narrow decode checks every field it does not read in full (see
    // `watcher_admission::json`), so a body it accepts is JSON. UTF-8 is checked first (a vectorised
    // scan), which lets the parse skip it per string and names the problem exactly.
    let text = std::str::from_utf8(body).map_err(ReviewError::NotUtf8)?;
    let mut request = match json::from_str::<Review>(text) {
        Ok(review) => review.request.ok_or(ReviewError::NoRequest)?,
        Err(pod_error) => {
            let (answer, result) = unreadable_object(text, &pod_error)?;
            return Ok(Read(Reading::Answered(answer, result)));
        }
    };
    let no_uid = request.uid.is_none();
    let (Some(uid), Some(kind)) = (request.uid.take(), request.kind.take()) else {
        return Err(missing_uid_or_kind(no_uid));
    };
    Ok(Read(Reading::Request { uid, kind, request }))
}

/// Answers AdmissionReviews from the Watchers in `source`, the ImagePolicies in `policies`
/// and the Watchers' stable revisions in `revisions`.
pub struct Reviewer<S> {
    source: S,
    policies: Arc<dyn PolicySource>,
    revisions: Arc<dyn RevisionSource>,
    options: InjectOptions,
}

impl<S: WatcherSource> Reviewer<S> {
    /// A reviewer reading Watchers from `source`, with no ImagePolicies.
    pub fn new(source: S, options: InjectOptions) -> Self {
        Self { source, policies: Arc::new(()), revisions: Arc::new(()), options }
    }

    /// The same reviewer, injecting the stable revisions of held rollouts from `revisions`
    /// (`updatePolicy.newPods: Stable`).
    pub fn with_revisions(self, revisions: Arc<dyn RevisionSource>) -> Self {
        Self { revisions, ..self }
    }

    /// The same reviewer, rewriting images with the policies of `policies`.
    pub fn with_policies(self, policies: Arc<dyn PolicySource>) -> Self {
        Self { policies, ..self }
    }

    /// The answer to one AdmissionReview body, and how it ended.
    pub fn review(&self, body: &[u8]) -> Result<(Answer, AdmissionResult), ReviewError> {
        Ok(self.answer(read(body)?))
    }

    /// The answer to a review read by [`read`], and how it ended.
    pub fn answer(&self, read: Read<'_>) -> (Answer, AdmissionResult) {
        match read.0 {
            Reading::Request { uid, kind, request } => self.respond(uid, &kind, &request),
            Reading::Answered(answer, result) => (answer, result),
        }
    }

    /// The answer to `request` (its uid and kind taken out as `uid` and `kind`).
    fn respond(&self, uid: String, kind: &Kind<'_>, request: &Request<'_>) -> (Answer, AdmissionResult) {
        if !is_pod(&kind.group, &kind.kind) {
            return not_a_pod(uid, request.namespace.as_deref(), kind);
        }
        if request.operation != Some(Operation::Create) {
            return (Answer::allow(uid), AdmissionResult::skipped);
        }
        let Some(pod) = request.object.as_ref() else {
            return (Answer::deny(uid, "the request has no pod".into()), AdmissionResult::error);
        };
        // Pods made from generateName have no name yet, and the object may omit its namespace:
        // the request's namespace is the one the pod is created in.
        let Some(namespace) = request.namespace.as_deref().or(pod.metadata.namespace.as_deref()) else {
            return (Answer::deny(uid, "the request has no namespace".into()), AdmissionResult::error);
        };
        let labelled = self.policies.namespace(namespace);
        let mut injection = if labelled.injection_disabled {
            // The webhook's own decision: it holds whatever the installed selectors say.
            let why = format!("namespace {namespace} is labelled {INJECTION_LABEL}={INJECTION_DISABLED}");
            Injection { skipped: Some(why), ..Injection::default() }
        } else {
            // The few the pod can concern, not every Watcher of the namespace: the same admission.
            let watchers = self.source.watchers_in(namespace).concerning(pod);
            let held = watcher_admission::canary::for_pod(&watchers, pod.labels(), &*self.revisions);
            // A user or RuntimeClass the cluster's Pod Security admission exempts: no level.
            let username = request.user_info.as_ref().and_then(|u| u.username.as_deref());
            let runtime_class = pod.spec.as_ref().and_then(|s| s.runtime_class_name.as_deref());
            let exempt = self.policies.pod_security_exempt(username, runtime_class);
            let none = watcher_admission::pod_security::NamespaceLevels::default();
            let levels = if exempt { &none } else { &labelled.pod_security };
            let resources = self.policies.resource_rules(namespace);
            let guards = Guards { levels, resources: &resources };
            let mut injection = if held.stable.is_empty() {
                inject_guarded(pod, namespace, &watchers, &self.options, &guards)
            } else {
                inject_guarded(pod, namespace, &held.watchers(&watchers), &self.options, &guards)
            };
            for (name, warning) in held.unavailable {
                if injection.injected.contains(&name) {
                    injection.warnings.push(warning);
                }
            }
            rewrite_images(pod, namespace, &self.policies.policies_for(namespace), &self.options, &mut injection);
            injection
        };
        if request.dry_run {
            answer_probe(pod, &mut injection);
        }
        log_injection(&uid, request.dry_run, namespace, pod.display_name(), &injection);
        Answer::from_injection(uid, injection)
    }
}

/// Marks a dry-run probe pod of `watcher-operator check`, or of the operator checking that
/// kube-apiserver applies the `matchConditions` it wrote, with the webhook's version, in the
/// same patch: the probe sees kube-apiserver apply it.
fn answer_probe(pod: &PodView, injection: &mut Injection) {
    let annotations = pod.annotations();
    let probe = annotations.contains_key(PROBE_ANNOTATION) || annotations.contains_key(SCOPE_PROBE_ANNOTATION);
    if !probe || annotations.contains_key(PROBED_ANNOTATION) {
        return;
    }
    // The probe annotation exists, so the annotations object does too.
    let path = json_patch::jsonptr::PointerBuf::from_tokens(["metadata", "annotations", PROBED_ANNOTATION]);
    let value = serde_json::Value::String(env!("CARGO_PKG_VERSION").to_owned());
    injection.patch.push(json_patch::PatchOperation::Add(json_patch::AddOperation { path, value }));
    injection.probed = true;
}

/// A request without the fields every AdmissionRequest has.
fn missing_uid_or_kind(uid: bool) -> ReviewError {
    ReviewError::Decode(format!("missing field `{}` in the request", if uid { "uid" } else { "kind" }))
}

/// A body that is not a review of a Pod: deny with a reason when there is a uid to answer.
/// (A second pass, on this path only: the object is read without its pod fields.)
fn unreadable_object(body: &str, pod_error: &json::Error) -> Result<(Answer, AdmissionResult), ReviewError> {
    let review = json::from_str::<Head>(body).map_err(|_| ReviewError::Decode(pod_error.to_string()))?;
    let request = review.request.ok_or(ReviewError::NoRequest)?;
    let (Some(uid), Some(kind)) = (request.uid, request.kind) else {
        return Err(ReviewError::Decode(pod_error.to_string()));
    };
    if !is_pod(&kind.group, &kind.kind) {
        return Ok(not_a_pod(uid, request.namespace.as_deref(), &kind));
    }
    let message = format!("cannot read the pod: {pod_error}");
    warn!(uid, namespace = request.namespace.as_deref(), %message, "admission request denied");
    Ok((Answer::deny(uid, message), AdmissionResult::error))
}

/// A review of anything but a Pod (the webhook's rules were widened): allowed unchanged, with a
/// warning naming the kind. The webhook fails open wherever it has nothing to do.
fn not_a_pod(uid: String, namespace: Option<&str>, kind: &Kind<'_>) -> (Answer, AdmissionResult) {
    let group = if kind.group.is_empty() { String::new() } else { format!(".{}", &*kind.group) };
    let warning = format!("watcher-operator mutates pods only; {}{group} admitted unchanged", &*kind.kind);
    info!(uid, namespace, kind = &*kind.kind, "not a pod: admitted unchanged");
    let mut answer = Answer::allow(uid);
    answer.response.warnings.push(warning);
    (answer, AdmissionResult::skipped)
}

fn is_pod(group: &str, kind: &str) -> bool {
    group.is_empty() && kind == "Pod"
}

fn log_injection(uid: &str, dry_run: bool, namespace: &str, pod: &str, injection: &Injection) {
    if let Some(reason) = &injection.refused {
        info!(uid, namespace, pod, dry_run, reason, "pod refused");
    } else if !injection.patch.is_empty() {
        info!(uid, namespace, pod, dry_run, watchers = ?injection.injected,
              rewritten = ?injection.rewritten, warnings = ?injection.warnings, "pod mutated");
    } else if injection.warnings.is_empty() && !injection.asked {
        // Most pods of a cluster ask for nothing: one line each would drown the rest.
        debug!(uid, namespace, pod, reason = injection.skipped.as_deref(), "pod not injected");
    } else {
        info!(uid, namespace, pod, dry_run, reason = injection.skipped.as_deref(),
              warnings = ?injection.warnings, "pod not injected");
    }
}

/// An `admission.k8s.io/v1` AdmissionReview carrying the response.
///
/// Written here rather than with kube's `AdmissionResponse`, which serialises `patch` as an array
/// of numbers: the API documents (and its maintainers require) base64, which is also a quarter
/// of the size.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    api_version: &'static str,
    kind: &'static str,
    response: AnswerResponse,
    /// What Pod Security did to each Watcher (counted, never sent).
    #[serde(skip)]
    pod_security: Vec<PodSecurityOutcome>,
    /// What the namespace's resource rules did to each Watcher (counted, never sent).
    #[serde(skip)]
    resources: Vec<ResourceOutcome>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct AnswerResponse {
    uid: String,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<AnswerStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Patch>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

/// JSON-patch operations, serialised base64-encoded as the API wants them.
#[derive(Debug)]
struct Patch(watcher_admission::Patch);

impl Patch {
    /// Appends the patch, base64-encoded, to `out`: its JSON is written at the end of `out`, moved
    /// up, and encoded into the room left before it, so the answer is built in one buffer.
    fn write_base64(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let start = out.len();
        self.0.write(out);
        let json_len = out.len() - start;
        let encoded_len = base64::encoded_len(json_len, true).unwrap_or_default();
        out.resize(start + encoded_len + json_len, 0);
        out.copy_within(start..start + json_len, start + encoded_len);
        let (encoded, json) = out.split_at_mut(start + encoded_len);
        let written = BASE64.encode_slice(json, &mut encoded[start..]).map_err(serde::ser::Error::custom)?;
        out.truncate(start + written);
        Ok(())
    }
}

impl Serialize for Patch {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut encoded = Vec::new();
        self.write_base64(&mut encoded).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(std::str::from_utf8(&encoded).map_err(serde::ser::Error::custom)?)
    }
}

#[derive(Debug, Serialize)]
struct AnswerStatus {
    status: &'static str,
    code: u16,
    reason: &'static str,
    message: String,
}

impl Answer {
    /// The answer as the JSON body of the response. Written here rather than by serde's derive
    /// (which gives the same JSON, see the tests): the patch is base64-encoded straight into the
    /// body, where serde would write it to a buffer, encode that into a string, and then scan
    /// the string for characters to escape. The JSON is serde_json's, byte for byte, written by
    /// [`json::write`], which scans strings eight bytes at a time.
    pub fn to_json(&self) -> serde_json::Result<Vec<u8>> {
        let response = &self.response;
        // Room for a patch of a sidecar or two: growing the buffer on the way costs more.
        let mut out = Vec::with_capacity(if response.patch.is_some() { 8192 } else { 256 });
        out.extend_from_slice(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#);
        json::write::string(&mut out, &response.uid);
        out.extend_from_slice(if response.allowed { b",\"allowed\":true" } else { b",\"allowed\":false" });
        if let Some(status) = &response.status {
            out.extend_from_slice(b",\"status\":");
            serde_json::to_writer(&mut out, status)?;
        }
        if let Some(patch) = &response.patch {
            out.extend_from_slice(b",\"patch\":\"");
            patch.write_base64(&mut out)?;
            out.push(b'"');
        }
        if let Some(patch_type) = response.patch_type {
            out.extend_from_slice(b",\"patchType\":");
            json::write::string(&mut out, patch_type);
        }
        if !response.warnings.is_empty() {
            out.extend_from_slice(b",\"warnings\":[");
            for (i, warning) in response.warnings.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json::write::string(&mut out, warning);
            }
            out.push(b']');
        }
        out.extend_from_slice(b"}}");
        Ok(out)
    }

    fn new(response: AnswerResponse) -> Self {
        Self {
            api_version: "admission.k8s.io/v1",
            kind: "AdmissionReview",
            response,
            pod_security: Vec::new(),
            resources: Vec::new(),
        }
    }

    /// What Pod Security did to each Watcher of the pod.
    pub fn pod_security(&self) -> &[PodSecurityOutcome] {
        &self.pod_security
    }

    /// What the namespace's resource rules did to each Watcher of the pod.
    pub fn resources(&self) -> &[ResourceOutcome] {
        &self.resources
    }

    fn allow(uid: String) -> Self {
        Self::new(AnswerResponse { uid, allowed: true, status: None, patch: None, patch_type: None, warnings: vec![] })
    }

    fn deny(uid: String, message: String) -> Self {
        let status = AnswerStatus { status: "Failure", code: 400, reason: "BadRequest", message };
        Self::new(AnswerResponse {
            uid,
            allowed: false,
            status: Some(status),
            patch: None,
            patch_type: None,
            warnings: vec![],
        })
    }

    fn from_injection(uid: String, injection: Injection) -> (Self, AdmissionResult) {
        let outcomes = injection.pod_security.iter().map(|report| match &report.violations {
            None => PodSecurityOutcome::adapted,
            Some(_) if injection.refused.is_some() => PodSecurityOutcome::refused,
            Some(_) => PodSecurityOutcome::left_out,
        });
        let pod_security = outcomes.collect();
        let resources = injection.resources.iter().map(|report| match &report.violations {
            None => ResourceOutcome::adapted,
            Some(_) if injection.refused.is_some() => ResourceOutcome::refused,
            Some(_) => ResourceOutcome::left_out,
        });
        let resources = resources.collect();
        if let Some(reason) = injection.refused {
            let status = AnswerStatus { status: "Failure", code: 403, reason: "Forbidden", message: reason };
            let mut answer = Self::deny(uid, String::new());
            answer.response.status = Some(status);
            answer.pod_security = pod_security;
            answer.resources = resources;
            return (answer, AdmissionResult::refused);
        }
        let mut answer = Self::allow(uid);
        answer.pod_security = pod_security;
        answer.resources = resources;
        answer.response.warnings = injection.warnings;
        if injection.patch.is_empty() {
            return (answer, AdmissionResult::skipped);
        }
        let result = if !injection.injected.is_empty() {
            AdmissionResult::injected
        } else if !injection.rewritten.is_empty() {
            AdmissionResult::rewritten
        } else if injection.probed {
            AdmissionResult::probe
        } else if injection.skipped.is_some() {
            // Only the Watchers left out, said on the pod.
            AdmissionResult::skipped
        } else {
            AdmissionResult::rewritten
        };
        answer.response.patch = Some(Patch(injection.patch));
        answer.response.patch_type = Some("JSONPatch");
        (answer, result)
    }
}

#[cfg(test)]
mod tests;
