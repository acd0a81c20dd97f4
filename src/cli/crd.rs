//! `noderotation crd`: prints the RotationPolicy CustomResourceDefinition.
use clap::Args;

use crate::policy::crd::crd_yaml;

/// The command line of `noderotation crd`.
#[derive(Debug, Args)]
pub struct CrdArgs {}

/// Prints the CRD YAML (with a "generated" preamble) to stdout.
pub fn run(_args: &CrdArgs) -> anyhow::Result<i32> {
    print!("{}", crd_yaml()?);
    Ok(0)
}
