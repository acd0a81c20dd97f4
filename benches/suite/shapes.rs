//! The shapes of part 3's Nodes and NodeClaims: the minimal ones earlier runs (and the peer's
//! figures) used, and realistic ones built from `fixtures/` (one Node and one NodeClaim as an EKS
//! cluster under Karpenter has them: 30 and 23 labels, Karpenter's and the kubelet's
//! annotations, four kubelet conditions, nodeInfo, 30 images, six claim conditions, eight
//! requirements, managedFields of three managers; about 17.5 KB and 10 KB of JSON). Each object
//! of the realistic fleet is the fixture with its names, uids, providerID, addresses and
//! machine ids varied, so no two objects share a string a decoder could intern.
use serde_json::{Value, json};

pub const POOL_LABEL: &str = "karpenter.sh/nodepool";
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

const NODE: &str = include_str!("fixtures/node.json");
const CLAIM: &str = include_str!("fixtures/nodeclaim.json");

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// EKS/Karpenter-shaped Nodes and NodeClaims (`benches/suite/fixtures/`).
    Realistic,
    /// The small objects of earlier runs: comparable with their figures.
    Minimal,
}

impl Shape {
    pub fn label(self) -> &'static str {
        match self {
            Shape::Realistic => "realistic shapes",
            Shape::Minimal => "minimal shapes",
        }
    }
}

/// Makes the objects of one shape.
pub struct Objects {
    pub shape: Shape,
    node: Value,
    claim: Value,
}

/// A stable 64-bit number per name (FNV-1a): the varied ids derive from it.
fn serial(name: &str) -> u64 {
    name.bytes()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

fn uid(name: &str) -> String {
    let n = serial(name);
    format!("{:08x}-{:04x}-4000-8000-{:012x}", n >> 32, n & 0xffff, n & 0xffff_ffff_ffff)
}

fn provider_id(shape: Shape, node: &str) -> String {
    match shape {
        Shape::Realistic => format!("aws:///eu-west-1a/i-{:017x}", serial(node)),
        Shape::Minimal => format!("kwok://{node}"),
    }
}

fn set(v: &mut Value, path: &[&str], value: Value) {
    let mut at = v;
    for key in &path[..path.len() - 1] {
        at = &mut at[*key];
    }
    at[path[path.len() - 1]] = value;
}

impl Objects {
    pub fn new(shape: Shape) -> anyhow::Result<Objects> {
        let mut node: Value = serde_json::from_str(NODE)?;
        let mut claim: Value = serde_json::from_str(CLAIM)?;
        // The API server assigns these on create.
        for obj in [&mut node, &mut claim] {
            if let Some(meta) = obj["metadata"].as_object_mut() {
                for key in ["uid", "resourceVersion", "creationTimestamp", "generation"] {
                    meta.remove(key);
                }
            }
        }
        Ok(Objects { shape, node, claim })
    }

    /// The Node `name` of `pool`, backing `claim`, Ready.
    pub fn node(&self, name: &str, pool: &str, claim: &str) -> Value {
        let pid = provider_id(self.shape, name);
        if self.shape == Shape::Minimal {
            return json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {POOL_LABEL: pool, HOSTNAME_LABEL: name}},
                "spec": {"providerID": pid},
                "status": {
                    "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": ""}]
                }
            });
        }
        let n = serial(name);
        let ip = format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
        let dns = format!("ip-{}.eu-west-1.compute.internal", ip.replace('.', "-"));
        let mut v = self.node.clone();
        set(&mut v, &["metadata", "name"], json!(name));
        set(&mut v, &["metadata", "labels", POOL_LABEL], json!(pool));
        set(&mut v, &["metadata", "labels", HOSTNAME_LABEL], json!(name));
        set(
            &mut v,
            &["metadata", "annotations", "alpha.kubernetes.io/provided-node-ip"],
            json!(ip),
        );
        set(
            &mut v,
            &["metadata", "annotations", "csi.volume.kubernetes.io/nodeid"],
            json!(format!("{{\"ebs.csi.aws.com\":\"i-{n:017x}\"}}")),
        );
        set(
            &mut v,
            &["metadata", "ownerReferences"],
            json!([{"apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim", "name": claim, "uid": uid(claim), "blockOwnerDeletion": true}]),
        );
        set(&mut v, &["spec", "providerID"], json!(pid));
        set(
            &mut v,
            &["status", "addresses"],
            json!([{"type": "InternalIP", "address": ip},
            {"type": "InternalDNS", "address": dns}, {"type": "Hostname", "address": dns}]),
        );
        set(&mut v, &["status", "nodeInfo", "machineID"], json!(format!("ec2{n:029x}")));
        set(&mut v, &["status", "nodeInfo", "systemUUID"], json!(uid(&format!("system-{name}"))));
        set(&mut v, &["status", "nodeInfo", "bootID"], json!(uid(&format!("boot-{name}"))));
        v
    }

    /// The NodeClaim `name` of `pool`, without its status (a status subresource: see
    /// [`Objects::claim_status`]).
    pub fn claim(&self, name: &str, pool: &str) -> Value {
        if self.shape == Shape::Minimal {
            return json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "labels": {POOL_LABEL: pool}, "finalizers": ["karpenter.sh/termination"]},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                    "requirements": [{"key": POOL_LABEL, "operator": "In", "values": [pool]}],
                    "expireAfter": "720h",
                    "terminationGracePeriod": "10m"
                }
            });
        }
        let node = format!("node-{name}");
        let mut v = self.claim.clone();
        if let Some(obj) = v.as_object_mut() {
            obj.remove("status");
        }
        set(&mut v, &["metadata", "name"], json!(name));
        set(&mut v, &["metadata", "labels", POOL_LABEL], json!(pool));
        set(&mut v, &["metadata", "labels", HOSTNAME_LABEL], json!(node));
        set(
            &mut v,
            &["metadata", "ownerReferences"],
            json!([{"apiVersion": "karpenter.sh/v1",
            "kind": "NodePool", "name": pool, "uid": uid(pool), "blockOwnerDeletion": true}]),
        );
        if let Some(reqs) = v["spec"]["requirements"].as_array_mut() {
            for r in reqs.iter_mut().filter(|r| r["key"] == POOL_LABEL) {
                r["values"] = json!([pool]);
            }
        }
        v
    }

    /// The status of a Ready claim registered as `node`: a merge patch of the status
    /// subresource.
    pub fn claim_status(&self, node: &str) -> Value {
        let pid = provider_id(self.shape, node);
        if self.shape == Shape::Minimal {
            let t = "2026-01-01T00:00:00Z";
            return json!({"status": {
                "nodeName": node, "providerID": pid,
                "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": t}]
            }});
        }
        let mut status = self.claim["status"].clone();
        status["nodeName"] = json!(node);
        status["providerID"] = json!(pid);
        json!({ "status": status })
    }
}
