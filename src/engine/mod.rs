//! The interpreter that runs the rule tables.
