//! Part 3: the operator against a real kube-apiserver.
use std::path::PathBuf;
use std::time::Duration;
pub struct Config {
    pub nodes: usize,
    pub pods: usize,
    pub steady: Duration,
    pub binary: PathBuf,
    pub repo: PathBuf,
}
pub struct Apiserver;
pub fn run(c: &Config) -> anyhow::Result<Apiserver> {
    anyhow::bail!(
        "not implemented yet ({} nodes, {} pods, {:?}, {}, {})",
        c.nodes,
        c.pods,
        c.steady,
        c.binary.display(),
        c.repo.display()
    )
}
