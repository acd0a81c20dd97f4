pub mod rules;
pub mod uninstall;
