//! Authenticated scraping of `/metrics` (`--metrics-auth kubernetes`), as Kubernetes components
//! protect theirs: the scraper sends its bearer token, a `TokenReview` says who it is, and a
//! `SubjectAccessReview` says whether that identity may `get` the non-resource URL `/metrics`
//! (RBAC: `nonResourceURLs: ["/metrics"]`, `verbs: ["get"]`). Nothing is cached: a scrape every
//! 30 s costs two small requests, and a revoked grant takes effect at the next scrape.
use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

use super::http::{Authorizer, Verdict};

/// The path and verb a scraper must be allowed.
pub(crate) const METRICS_PATH: &str = "/metrics";

/// [`Authorizer`] by `TokenReview` and `SubjectAccessReview` against the API server.
pub(crate) struct TokenAccessReview {
    pub client: Client,
}

impl Authorizer for TokenAccessReview {
    fn check(&self, token: Option<String>) -> BoxFuture<'static, Verdict> {
        let client = self.client.clone();
        Box::pin(async move { review(&client, token).await })
    }
}

/// Who the token belongs to, and whether they may get `/metrics`.
pub(crate) async fn review(client: &Client, token: Option<String>) -> Verdict {
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return Verdict::Unauthenticated("a bearer token is required".into());
    };
    let request = TokenReview {
        spec: TokenReviewSpec { token: Some(token), audiences: None },
        ..TokenReview::default()
    };
    let reviews = Api::<TokenReview>::all(client.clone());
    let status = match reviews.create(&PostParams::default(), &request).await {
        Ok(review) => review.status.unwrap_or_default(),
        Err(err) => return Verdict::Unavailable(format!("TokenReview failed: {err}")),
    };
    if status.authenticated != Some(true) {
        let why = status.error.filter(|e| !e.is_empty());
        return Verdict::Unauthenticated(why.unwrap_or_else(|| "the token is not valid".into()));
    }
    let user = status.user.unwrap_or_default();
    let who = user.username.clone().unwrap_or_default();
    let access = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username,
            groups: user.groups,
            uid: user.uid,
            extra: user.extra,
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(METRICS_PATH.into()),
                verb: Some("get".into()),
            }),
            resource_attributes: None,
        },
        ..SubjectAccessReview::default()
    };
    let access_reviews = Api::<SubjectAccessReview>::all(client.clone());
    match access_reviews.create(&PostParams::default(), &access).await {
        Ok(review) => {
            let status = review.status.unwrap_or_default();
            if status.allowed {
                Verdict::Allowed
            } else {
                let reason = status.reason.filter(|r| !r.is_empty());
                Verdict::Forbidden(match reason {
                    Some(reason) => format!("{who} may not get {METRICS_PATH}: {reason}"),
                    None => format!("{who} may not get {METRICS_PATH}"),
                })
            }
        }
        Err(err) => Verdict::Unavailable(format!("SubjectAccessReview failed: {err}")),
    }
}
