//! Start-up preflight (spec §5.1): before any reconcile, fail at once when the cluster does not
//! serve `karpenter.sh/v1` nodepools/nodeclaims (or our RotationPolicy), or RBAC cannot read
//! them. A successful list that decodes into the v1 types confirms a wire-compatible schema; there
//! is no per-field CRD introspection.
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::karpenter::{NodeClaim, NodePool};
use crate::policy::crd::RotationPolicy;

/// Why the controller must not start. The message names the resource.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreflightError {
    #[error("the API server does not serve {resource} (group/version {api_version} {why}); {hint}")]
    NotServed { resource: String, api_version: String, why: String, hint: String },
    #[error(
        "cannot list {resource}: {message}; grant the controller get/list/watch on it (deploy/ ClusterRole)"
    )]
    NotReadable { resource: String, message: String },
    #[error("{resource} does not decode as {api_version}: {message}")]
    Incompatible { resource: String, api_version: String, message: String },
    #[error("preflight could not reach the API server while checking {resource}: {message}")]
    Unreachable { resource: String, message: String },
    #[error(
        "the placeholder PriorityClass {name:?} does not exist: every surge placeholder would be rejected at admission and every rotation rolled back at readyTimeout; apply deploy/base/priorityclass.yaml (the Helm chart installs it too), or set --priority-class / NODEROTATION_PRIORITY_CLASS to an existing PriorityClass"
    )]
    MissingPriorityClass { name: String },
    #[error(
        "the placeholder PriorityClass {name:?} is not safe: {}. A placeholder requests a node's worth of resources and must never preempt a workload. Both fields are immutable: delete the class and create it again as deploy/base/priorityclass.yaml does (value -10, preemptionPolicy Never), or set --priority-class / NODEROTATION_PRIORITY_CLASS to a class that is",
        problems.join("; ")
    )]
    UnsafePriorityClass { name: String, problems: Vec<String> },
}

/// What a GET of the placeholder PriorityClass found (the I/O half of the check).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PriorityClassLookup {
    Found(Box<PriorityClass>),
    NotFound,
    /// 401/403, with the API server's message.
    Forbidden(String),
    /// Anything else (connection, 5xx), with its message.
    Failed(String),
}

const PRIORITY_CLASSES: &str = "priorityclasses.scheduling.k8s.io/v1";

/// The verdict on the placeholder PriorityClass (spec §5.1 preflight, §3.3): the
/// placeholder names it, the Priority admission plugin rejects a pod whose class is missing, and
/// a class that is not negative or may preempt would let a placeholder evict workloads.
pub(crate) fn priority_class_verdict(
    name: &str,
    lookup: PriorityClassLookup,
) -> Result<(), PreflightError> {
    match lookup {
        PriorityClassLookup::Found(class) => match crate::placeholder::class_problems(&class) {
            problems if problems.is_empty() => Ok(()),
            problems => {
                Err(PreflightError::UnsafePriorityClass { name: name.to_string(), problems })
            }
        },
        PriorityClassLookup::NotFound => {
            Err(PreflightError::MissingPriorityClass { name: name.to_string() })
        }
        PriorityClassLookup::Forbidden(message) => Err(PreflightError::NotReadable {
            resource: format!("{PRIORITY_CLASSES} {name:?}"),
            message,
        }),
        PriorityClassLookup::Failed(message) => Err(PreflightError::Unreachable {
            resource: format!("{PRIORITY_CLASSES} {name:?}"),
            message,
        }),
    }
}

/// Checks that the PriorityClass the placeholders name exists and is safe for them.
pub(crate) async fn check_priority_class(
    client: &Client,
    name: &str,
) -> Result<(), PreflightError> {
    let api = Api::<PriorityClass>::all(client.clone());
    let lookup = match api.get_opt(name).await {
        Ok(Some(class)) => PriorityClassLookup::Found(Box::new(class)),
        Ok(None) => PriorityClassLookup::NotFound,
        Err(kube::Error::Api(status)) if status.code == 403 || status.code == 401 => {
            PriorityClassLookup::Forbidden(status.message)
        }
        Err(err) => PriorityClassLookup::Failed(err.to_string()),
    };
    priority_class_verdict(name, lookup)
}

/// One resource to check: `plural.group/version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub hint: String,
}

impl Requirement {
    pub(crate) fn of<K: Resource<DynamicType = ()>>(hint: &str) -> Self {
        Requirement {
            group: K::group(&()).into_owned(),
            version: K::version(&()).into_owned(),
            plural: K::plural(&()).into_owned(),
            hint: hint.to_string(),
        }
    }

    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `nodepools.karpenter.sh/v1`.
    pub(crate) fn name(&self) -> String {
        format!("{}.{}/{}", self.plural, self.group, self.version)
    }
}

const KARPENTER_HINT: &str =
    "install Karpenter (karpenter.sh/v1 CRDs) or enable EKS Auto Mode before starting noderotation";
const POLICY_HINT: &str =
    "install the RotationPolicy CRD: kubectl apply -f crds/rotationpolicy.yaml";

/// Checks that the group/version serves the resource (discovery).
pub async fn check_served(client: &Client, req: &Requirement) -> Result<(), PreflightError> {
    let not_served = |why: String| PreflightError::NotServed {
        resource: req.name(),
        api_version: req.api_version(),
        why,
        hint: req.hint.clone(),
    };
    match client.list_api_group_resources(&req.api_version()).await {
        Ok(list) => {
            if list.resources.iter().any(|r| r.name == req.plural) {
                Ok(())
            } else {
                Err(not_served(format!("is served but has no resource {:?}", req.plural)))
            }
        }
        Err(kube::Error::Api(status)) if status.code == 404 => {
            Err(not_served("is not served".into()))
        }
        Err(kube::Error::Api(status)) if status.code == 403 => Err(PreflightError::NotReadable {
            resource: req.name(),
            message: format!("discovery forbidden: {}", status.message),
        }),
        Err(err) => {
            Err(PreflightError::Unreachable { resource: req.name(), message: err.to_string() })
        }
    }
}

/// Lists one object of `K` and decodes it.
pub(crate) async fn check_readable<K>(client: &Client) -> Result<(), PreflightError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let req = Requirement::of::<K>("");
    let api = Api::<K>::all(client.clone());
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 403 || status.code == 401 => {
            Err(PreflightError::NotReadable { resource: req.name(), message: status.message })
        }
        Err(kube::Error::SerdeError(err)) => Err(PreflightError::Incompatible {
            resource: req.name(),
            api_version: req.api_version(),
            message: err.to_string(),
        }),
        Err(err) => {
            Err(PreflightError::Unreachable { resource: req.name(), message: err.to_string() })
        }
    }
}

/// The full preflight: Karpenter's NodePools and NodeClaims, then our RotationPolicies.
pub async fn preflight(client: &Client) -> Result<(), PreflightError> {
    check_served(client, &Requirement::of::<NodePool>(KARPENTER_HINT)).await?;
    check_served(client, &Requirement::of::<NodeClaim>(KARPENTER_HINT)).await?;
    check_readable::<NodePool>(client).await?;
    check_readable::<NodeClaim>(client).await?;
    check_served(client, &Requirement::of::<RotationPolicy>(POLICY_HINT)).await?;
    check_readable::<RotationPolicy>(client).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_resource() {
        let req = Requirement::of::<NodeClaim>(KARPENTER_HINT);
        assert_eq!(req.name(), "nodeclaims.karpenter.sh/v1");
        let err = PreflightError::NotServed {
            resource: req.name(),
            api_version: req.api_version(),
            why: "is not served".into(),
            hint: req.hint.clone(),
        };
        let text = err.to_string();
        assert!(text.contains("nodeclaims.karpenter.sh/v1"), "{text}");
        assert!(text.contains("karpenter.sh/v1 is not served"), "{text}");
    }

    fn found(value: i32, policy: Option<&str>) -> PriorityClassLookup {
        PriorityClassLookup::Found(Box::new(PriorityClass {
            value,
            preemption_policy: policy.map(str::to_string),
            ..PriorityClass::default()
        }))
    }

    #[test]
    fn an_unsafe_placeholder_priority_class_fails_naming_it_and_what_to_change() {
        assert_eq!(priority_class_verdict("p", found(-10, Some("Never"))), Ok(()));
        let err = priority_class_verdict("high", found(1000, Some("PreemptLowerPriority")))
            .expect_err("a positive, preempting class");
        let text = err.to_string();
        assert!(text.contains("PriorityClass \"high\" is not safe"), "{text}");
        assert!(text.contains("its value is 1000 (it must be negative"), "{text}");
        assert!(
            text.contains("preemptionPolicy is PreemptLowerPriority (it must be Never"),
            "{text}"
        );
        assert!(text.contains("delete the class and create it again"), "{text}");
        assert!(text.contains("--priority-class"), "{text}");
        let err = priority_class_verdict("p", found(-10, None)).expect_err("may preempt");
        assert!(
            matches!(err, PreflightError::UnsafePriorityClass { ref problems, .. } if problems.len() == 1),
            "{err:?}"
        );
    }

    #[test]
    fn a_missing_placeholder_priority_class_fails_with_what_to_do() {
        let err = priority_class_verdict("noderotation-placeholder", PriorityClassLookup::NotFound)
            .expect_err("missing");
        let text = err.to_string();
        assert!(text.contains("\"noderotation-placeholder\" does not exist"), "{text}");
        assert!(text.contains("deploy/base/priorityclass.yaml"), "{text}");
        assert!(text.contains("--priority-class"), "{text}");
        let err = priority_class_verdict("p", PriorityClassLookup::Forbidden("no".into()))
            .expect_err("forbidden");
        assert!(matches!(err, PreflightError::NotReadable { .. }), "{err:?}");
        assert!(err.to_string().contains("priorityclasses.scheduling.k8s.io/v1"), "{err}");
        let err = priority_class_verdict("p", PriorityClassLookup::Failed("eof".into()))
            .expect_err("failed");
        assert!(matches!(err, PreflightError::Unreachable { .. }), "{err:?}");
    }
}
