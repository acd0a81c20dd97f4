//! The Karpenter/kubelet actor of the rotation tests (see `rotation` tests in apiserver.rs).
#![allow(dead_code)]
