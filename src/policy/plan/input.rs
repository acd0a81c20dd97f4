//! The manifests `plan` reads: every RotationPolicy of a file (strict field validation as
//! `kubectl apply`), the one to plan, and the pool of a `karpenter.sh/v1` NodePool.
use anyhow::{anyhow, bail};
use kube::ResourceExt;
use serde::Deserialize;

use super::PoolInput;
use crate::karpenter::NodePool;
use crate::policy::crd::RotationPolicy;
use crate::policy::duration;
use crate::policy::feasibility::PoolFacts;
use crate::policy::selector;
use crate::policy::strict;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TypeMeta {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

/// Every RotationPolicy in a (possibly multi-document) YAML manifest. Errors name the document
/// and the field (`spec.surge.readyTimeout: invalid type ... at line 12 column 19`).
pub(crate) fn parse_policies(text: &str) -> anyhow::Result<Vec<RotationPolicy>> {
    let mut kinds = Vec::new();
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let value = serde_norway::Value::deserialize(doc)
            .map_err(|e| anyhow!("document {}: {e}", i + 1))?;
        if value.is_null() {
            kinds.push(None); // an empty document (`---` at the end)
            continue;
        }
        let meta: TypeMeta =
            serde_norway::from_value(value).map_err(|e| anyhow!("document {}: {e}", i + 1))?;
        kinds.push(Some(meta));
    }
    let mut policies = Vec::new();
    let schema = strict_schema()?;
    let values: Vec<serde_norway::Value> = serde_norway::Deserializer::from_str(text)
        .map(|doc| serde_norway::Value::deserialize(doc).unwrap_or_default())
        .collect();
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let Some(Some(meta)) = kinds.get(i) else { continue };
        if meta.kind != "RotationPolicy" || meta.api_version != "noderotation.io/v1alpha1" {
            bail!(
                "document {}: apiVersion/kind: expected noderotation.io/v1alpha1 RotationPolicy, \
                 got {:?} {:?}",
                i + 1,
                meta.api_version,
                meta.kind
            );
        }
        let policy =
            RotationPolicy::deserialize(doc).map_err(|e| anyhow!("document {}: {e}", i + 1))?;
        if policy.metadata.name.as_deref().is_none_or(str::is_empty) {
            bail!("document {}: metadata.name: required", i + 1);
        }
        let unknown = values.get(i).map(|v| strict::unknown_fields(v, &schema)).unwrap_or_default();
        if !unknown.is_empty() {
            bail!(
                "document {}: unknown field{} {} (strict field validation, as kubectl apply)",
                i + 1,
                if unknown.len() == 1 { "" } else { "s" },
                unknown.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            );
        }
        policies.push(policy);
    }
    if policies.is_empty() {
        bail!("no RotationPolicy in the file");
    }
    Ok(policies)
}

/// The CRD's `openAPIV3Schema`, what strict field validation checks a manifest against.
fn strict_schema() -> anyhow::Result<serde_json::Value> {
    let crd = crate::policy::crd::crd()?;
    let schema = crd
        .spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .ok_or_else(|| anyhow!("the RotationPolicy CRD has no schema"))?;
    Ok(serde_json::to_value(schema)?)
}

/// The policy named `name`, or the only one.
pub(crate) fn pick_policy(
    policies: Vec<RotationPolicy>,
    name: Option<&str>,
) -> anyhow::Result<RotationPolicy> {
    let names: Vec<String> =
        policies.iter().map(|p| p.metadata.name.clone().unwrap_or_default()).collect();
    match name {
        Some(name) => {
            policies.into_iter().find(|p| p.metadata.name.as_deref() == Some(name)).ok_or_else(
                || anyhow!("no RotationPolicy named {name:?} (found: {})", names.join(", ")),
            )
        }
        None if policies.len() == 1 => {
            policies.into_iter().next().ok_or_else(|| anyhow!("no RotationPolicy in the file"))
        }
        None => bail!(
            "holds {} RotationPolicies ({}); choose one with --name",
            policies.len(),
            names.join(", ")
        ),
    }
}

/// The pool of a `karpenter.sh/v1` NodePool manifest `text` read from `file`; `nodes` overrides
/// its node count.
pub(crate) fn pool_from_manifest(
    file: &str,
    text: &str,
    policy: &RotationPolicy,
    nodes: Option<u64>,
) -> anyhow::Result<(PoolInput, PoolFacts)> {
    let file = file.to_string();
    let meta: TypeMeta = serde_norway::from_str(text).map_err(|e| anyhow!("{file}: {e}"))?;
    if meta.kind != "NodePool" || meta.api_version != "karpenter.sh/v1" {
        bail!(
            "{file}: apiVersion/kind: expected karpenter.sh/v1 NodePool, got {:?} {:?}",
            meta.api_version,
            meta.kind
        );
    }
    let pool: NodePool = serde_norway::from_str(text).map_err(|e| anyhow!("{file}: {e}"))?;
    pool_from_nodepool(&file, &pool, policy, nodes)
}

/// The pool of a NodePool read from `source` (a file, or the cluster); `nodes` overrides its
/// node count.
pub(crate) fn pool_from_nodepool(
    source: &str,
    pool: &NodePool,
    policy: &RotationPolicy,
    nodes: Option<u64>,
) -> anyhow::Result<(PoolInput, PoolFacts)> {
    let file = source.to_string();
    let expire_after =
        pool.expire_after().map_err(|e| anyhow!("{file}: spec.template.spec.expireAfter: {e}"))?;
    let tgp = pool
        .termination_grace_period()
        .map_err(|e| anyhow!("{file}: spec.template.spec.terminationGracePeriod: {e}"))?;
    let selected = selector::selector_matches(&policy.spec.node_pool_selector, pool.labels());
    let nodes = nodes.or_else(|| pool.node_count());
    let input = PoolInput {
        source: file,
        name: pool.metadata.name.clone(),
        expire_after: expire_after.to_string(),
        termination_grace_period: tgp.map(duration::format),
        nodes,
        selected_by_policy: selected,
    };
    let facts = PoolFacts {
        expire_after,
        termination_grace_period: tgp,
        nodes,
        exhausted_limits: pool.exhausted_limits(),
        static_pool: pool.is_static(),
    };
    Ok((input, facts))
}
