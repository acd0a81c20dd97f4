pub mod crd;
pub mod plan;
pub mod rules;
pub mod simulate;
pub mod uninstall;
