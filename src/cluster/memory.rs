//! The in-memory cluster (being written).
