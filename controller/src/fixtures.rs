//! A mocked API server for reconciler tests: every scenario lists the exact requests it
//! expects, in order, and fails when one differs or never comes.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use prometheus_client::registry::Registry;
use serde_json::Value;
use tower_test::mock::{Handle, SendResponse};

use crate::{Context, Metrics};

/// How long a scenario waits for a request before it fails.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The server side of a mocked `Client`.
pub(crate) struct ApiServerVerifier(Handle<Request<Body>, Response<Body>>);

impl Context {
    /// A context whose client talks to the returned verifier.
    pub(crate) fn test() -> (Arc<Self>, ApiServerVerifier) {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let metrics = Metrics::register(&mut Registry::default());
        (Arc::new(Self::new(client, metrics)), ApiServerVerifier(handle))
    }
}

/// A request the verifier has taken: its JSON body and the way to answer it.
pub(crate) struct Call {
    pub(crate) body: Value,
    send: SendResponse<Response<Body>>,
}

impl Call {
    /// Answers with `status` and a JSON body.
    pub(crate) fn respond(self, status: StatusCode, body: &impl serde::Serialize) {
        let bytes = serde_json::to_vec(body).expect("response serialises");
        let response = Response::builder().status(status).body(Body::from(bytes)).expect("valid response");
        self.send.send_response(response);
    }

    /// Answers 201 with the request's own body, as kube-apiserver answers a create.
    pub(crate) fn created(self) {
        let body = self.body.clone();
        self.respond(StatusCode::CREATED, &body);
    }

    /// Answers 200 with `body`.
    pub(crate) fn ok(self, body: &impl serde::Serialize) {
        self.respond(StatusCode::OK, body);
    }

    /// Answers a watch with `events`, one JSON object a line, then ends the stream.
    pub(crate) fn events(self, events: &[Value]) {
        let lines: String = events.iter().map(|event| format!("{event}\n")).collect();
        let response = Response::builder().status(StatusCode::OK).body(Body::from(lines.into_bytes()));
        self.send.send_response(response.expect("valid response"));
    }

    /// Answers with a `metav1.Status` failure of `code`.
    pub(crate) fn fail(self, code: u16, reason: &str) {
        let status = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": format!("mocked {reason}"), "reason": reason, "code": code,
        });
        self.respond(StatusCode::from_u16(code).expect("valid code"), &status);
    }
}

impl ApiServerVerifier {
    /// Takes the next request, asserting its method, its path and its exact set of query
    /// parameters (`uri` as `path?k=v&k=v`, in any order).
    pub(crate) async fn expect(&mut self, method: Method, uri: &str) -> Call {
        let (request, send) = tokio::time::timeout(TIMEOUT, self.0.next_request())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {method} {uri}"))
            .unwrap_or_else(|| panic!("client dropped before {method} {uri}"));
        let (want_path, want_query) = uri.split_once('?').unwrap_or((uri, ""));
        assert_eq!(
            (request.method(), request.uri().path(), query_set(request.uri().query().unwrap_or(""))),
            (&method, want_path, query_set(want_query)),
            "unexpected request {} {}",
            request.method(),
            request.uri()
        );
        let bytes = request.into_body().collect_bytes().await.expect("request body");
        let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).expect("JSON body") };
        Call { body, send }
    }

    /// Answers the next `count` requests, in whatever order they come (a reconcile that writes
    /// to several namespaces at once), with `answer(method, path?query, body)`. Returns what was
    /// asked, sorted, for the test to compare.
    pub(crate) async fn serve(
        &mut self,
        count: usize,
        mut answer: impl FnMut(&Method, &str, &Value) -> (u16, Value),
    ) -> Vec<(Method, String, Value)> {
        let mut seen = Vec::new();
        for _ in 0..count {
            let (request, send) = tokio::time::timeout(TIMEOUT, self.0.next_request())
                .await
                .unwrap_or_else(|_| panic!("timed out after {} of {count} requests: {seen:?}", seen.len()))
                .expect("client dropped early");
            let method = request.method().clone();
            let query: Vec<&str> = query_set(request.uri().query().unwrap_or("")).into_iter().collect();
            let uri = match query.as_slice() {
                [] => request.uri().path().to_owned(),
                pairs => format!("{}?{}", request.uri().path(), pairs.join("&")),
            };
            let bytes = request.into_body().collect_bytes().await.expect("request body");
            let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).expect("JSON body") };
            let (status, response) = answer(&method, &uri, &body);
            Call { body: Value::Null, send }.respond(StatusCode::from_u16(status).expect("valid status"), &response);
            seen.push((method, uri, body));
        }
        seen.sort_by(|a, b| (a.0.as_str(), &a.1).cmp(&(b.0.as_str(), &b.1)));
        seen
    }

    /// Asserts that no further request comes before every client is dropped.
    pub(crate) async fn expect_no_more(mut self) {
        let next = tokio::time::timeout(TIMEOUT, self.0.next_request()).await.expect("client still alive");
        if let Some((request, _)) = next {
            panic!("unexpected request {} {}", request.method(), request.uri());
        }
    }
}

fn query_set(query: &str) -> BTreeSet<&str> {
    query.split('&').filter(|pair| !pair.is_empty()).collect()
}

/// A `404 Not Found` answer's reason.
pub(crate) const NOT_FOUND: (u16, &str) = (404, "NotFound");
