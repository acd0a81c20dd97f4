//! `noderotation plan`. Placeholder until the policy issue lands.
use clap::Args;

#[derive(Debug, Args)]
pub struct PlanArgs {}

pub fn run(_args: &PlanArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`noderotation plan` is not implemented yet")
}
