//! Typed subsets of `karpenter.sh/v1` NodePool and NodeClaim. Placeholder until the policy issue lands.
