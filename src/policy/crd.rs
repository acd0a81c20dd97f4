//! `RotationPolicy` (`noderotation.io/v1alpha1`). Placeholder until the policy issue lands.
use clap::Args;

#[derive(Debug, Args)]
pub struct CrdArgs {}

pub fn run(_args: &CrdArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`noderotation crd` is not implemented yet")
}
