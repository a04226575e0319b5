//! Who may read `/metrics`: a bearer token that kube-apiserver authenticates (TokenReview) and
//! allows `get` on the non-resource URL `/metrics` (SubjectAccessReview), as controller-runtime's
//! `WithAuthenticationAndAuthorization` and kube-rbac-proxy decide. Verdicts are cached by the
//! token's SHA-256 (the token itself is not kept): an allowed token for [`ALLOWED_TTL`], a refused
//! one for [`REFUSED_TTL`], so a scrape every few seconds costs two API calls every two minutes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use tokio::sync::Semaphore;

/// How long an allowed token stays allowed without asking again: a token revoked (its
/// ServiceAccount deleted, its binding removed) still reads `/metrics` for up to this long.
pub(crate) const ALLOWED_TTL: Duration = Duration::from_secs(120);
/// How long a refused token stays refused: a permission just granted works within this.
pub(crate) const REFUSED_TTL: Duration = Duration::from_secs(10);
/// Verdicts kept at most; past it, the expired go, and if none has, all go.
const MAX_VERDICTS: usize = 1024;
/// Reviews in flight at most: a flood of new tokens waits rather than floods kube-apiserver.
const CONCURRENT_REVIEWS: usize = 4;
/// The path authorized, as a SubjectAccessReview names it.
const METRICS_PATH: &str = "/metrics";

/// What kube-apiserver said of a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Authenticated, and allowed `get` on `/metrics`.
    Allowed,
    /// Not a token kube-apiserver knows (or expired): 401.
    Unauthenticated,
    /// Authenticated as this user, who may not `get` `/metrics`: 403.
    Forbidden(String),
}

/// Reviews tokens with kube-apiserver, and remembers the verdicts.
pub(crate) struct MetricsAuth {
    client: kube::Client,
    verdicts: Mutex<HashMap<[u8; 32], (Verdict, Instant)>>,
    reviews: Semaphore,
}

impl MetricsAuth {
    pub(crate) fn new(client: kube::Client) -> Arc<Self> {
        Arc::new(Self { client, verdicts: Mutex::default(), reviews: Semaphore::new(CONCURRENT_REVIEWS) })
    }

    /// The verdict on `token`, from the cache while it holds, else from kube-apiserver (an
    /// error of the API is returned and not remembered).
    pub(crate) async fn verdict(&self, token: &str) -> Result<Verdict, kube::Error> {
        let key: [u8; 32] =
            ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref().try_into().unwrap_or([0; 32]);
        if let Some(verdict) = self.cached(&key) {
            return Ok(verdict);
        }
        let _permit = self.reviews.acquire().await;
        // Another request may have reviewed it while this one waited.
        if let Some(verdict) = self.cached(&key) {
            return Ok(verdict);
        }
        let verdict = self.review(token).await?;
        let ttl = if verdict == Verdict::Allowed { ALLOWED_TTL } else { REFUSED_TTL };
        if let Ok(mut verdicts) = self.verdicts.lock() {
            if verdicts.len() >= MAX_VERDICTS {
                let now = Instant::now();
                verdicts.retain(|_, (_, until)| *until > now);
                if verdicts.len() >= MAX_VERDICTS {
                    verdicts.clear();
                }
            }
            verdicts.insert(key, (verdict.clone(), Instant::now() + ttl));
        }
        Ok(verdict)
    }

    fn cached(&self, key: &[u8; 32]) -> Option<Verdict> {
        let verdicts = self.verdicts.lock().ok()?;
        verdicts.get(key).filter(|(_, until)| *until > Instant::now()).map(|(verdict, _)| verdict.clone())
    }

    /// A TokenReview, then (authenticated) a SubjectAccessReview of `get /metrics`.
    async fn review(&self, token: &str) -> Result<Verdict, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_owned()), ..TokenReviewSpec::default() },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone()).create(&PostParams::default(), &review).await?;
        let status = reviewed.status.unwrap_or_default();
        let user = status.user.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Ok(Verdict::Unauthenticated);
        }
        let username = user.username.unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(username.clone()),
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(METRICS_PATH.to_owned()),
                    verb: Some("get".to_owned()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let decided =
            Api::<SubjectAccessReview>::all(self.client.clone()).create(&PostParams::default(), &access).await?;
        let allowed = decided.status.is_some_and(|s| s.allowed && s.denied != Some(true));
        Ok(if allowed { Verdict::Allowed } else { Verdict::Forbidden(username) })
    }
}

/// The bearer token of `headers`, if there is one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The axum middleware in front of `/metrics`: 401 without a token kube-apiserver
/// authenticates, 403 without the permission, 503 when kube-apiserver cannot be asked.
pub(crate) async fn require(State(auth): State<Arc<MetricsAuth>>, request: Request, next: Next) -> Response {
    let unauthorized = |message: &str| {
        (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], format!("{message}\n")).into_response()
    };
    let Some(token) = bearer(request.headers()) else {
        return unauthorized("Unauthorized: /metrics needs a bearer token (Authorization: Bearer TOKEN)");
    };
    match auth.verdict(token).await {
        Ok(Verdict::Allowed) => next.run(request).await,
        Ok(Verdict::Unauthenticated) => unauthorized("Unauthorized: kube-apiserver does not authenticate this token"),
        Ok(Verdict::Forbidden(user)) => (
            StatusCode::FORBIDDEN,
            format!(
                "Forbidden: user {user:?} may not get {METRICS_PATH} (bind ClusterRole \
                 watcher-operator-metrics-reader)\n"
            ),
        )
            .into_response(),
        Err(error) => {
            tracing::warn!(%error, "cannot review a /metrics token");
            (StatusCode::SERVICE_UNAVAILABLE, format!("cannot review the token with kube-apiserver: {error}\n"))
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests;
