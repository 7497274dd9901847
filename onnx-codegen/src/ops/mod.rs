//! Operator schemas (to be written).
