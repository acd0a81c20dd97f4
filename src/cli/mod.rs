pub mod crd;
pub mod plan;
pub mod rules;
pub mod uninstall;
